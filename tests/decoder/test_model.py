import pytest
import torch

from decoder import DecoderConfig, RetrievalAugmentedTransformer
from decoder import batch as batching
from decoder.layers import RetrievalBias

CFG = DecoderConfig(vocab_size=50, d_model=32, n_encoder_layers=2, n_decoder_layers=2,
                    n_heads=4, d_ff=64, max_tokens=24, dropout=0.0)


def _model(seed: int = 0, **kw: object) -> RetrievalAugmentedTransformer:
    torch.manual_seed(seed)
    cfg = DecoderConfig(**{**CFG.to_dict(), **kw})  # type: ignore[arg-type]
    return RetrievalAugmentedTransformer(cfg).eval()


def _ids(*lengths: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, CFG.vocab_size, (n,), generator=g).tolist() for n in lengths]


def _inputs(nbr_weights: list[float], seed: int = 1) -> tuple[torch.Tensor, ...]:
    src = batching.sources(_ids(7, seed=seed), CFG)
    values = _ids(*[5 + i for i in range(len(nbr_weights))], seed=seed + 1)
    n_ids, n_w = batching.neighbours([values], [nbr_weights], CFG)
    tgt_in, _ = batching.targets(_ids(6, seed=seed + 2), CFG)
    return src, tgt_in, n_ids, n_w  # type: ignore[return-value]


def test_changing_future_target_tokens_leaves_earlier_logits_unchanged() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([0.7, 0.3])
    logits = model(src, tgt_in, n_ids, n_w)
    changed = tgt_in.clone()
    changed[0, 4:] = torch.tensor([9, 10, 11, 12])[: changed.size(1) - 4]
    logits2 = model(src, changed, n_ids, n_w)
    torch.testing.assert_close(logits2[:, :4], logits[:, :4])
    assert not torch.allclose(logits2[:, 4:], logits[:, 4:])  # the future did change


def test_neighbour_of_weight_near_zero_has_no_influence() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([1.0 - 1e-9, 1e-9])
    with_tiny = model(src, tgt_in, n_ids, n_w)
    without = model(src, tgt_in, n_ids[:, :1], torch.ones(1, 1))
    torch.testing.assert_close(with_tiny, without, atol=1e-5, rtol=1e-4)
    weighted = model(src, tgt_in, n_ids, torch.tensor([[0.5, 0.5]]))
    assert (weighted - without).abs().max() > 1e-3  # with real weight it is read


def test_zero_weight_and_absent_neighbours_are_masked_exactly() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([1.0, 0.0])
    torch.testing.assert_close(model(src, tgt_in, n_ids, n_w),
                               model(src, tgt_in, n_ids[:, :1], n_w[:, :1]))
    memory = model.encode_memory(src, n_ids, n_w)
    assert set(memory.segments[0][memory.mask[0]].tolist()) == {-1, 0}  # neighbour 1 masked


def test_k_zero_is_the_source_only_memory() -> None:
    model = _model()
    src, tgt_in, _, _ = _inputs([])
    empty = torch.zeros(1, 0, 4, dtype=torch.long)
    torch.testing.assert_close(model(src, tgt_in), model(src, tgt_in, empty, torch.zeros(1, 0)))
    memory = model.encode_memory(src)
    assert memory.states.shape[1] == src.size(1) and bool((memory.segments == -1).all())


def test_retrieval_bias_is_scale_times_log_weight_and_starts_at_one() -> None:
    bias = RetrievalBias(3)
    torch.testing.assert_close(bias.scale, torch.ones(3))
    log_w = torch.log(torch.tensor([[1.0, 0.5, 0.25]]))
    out = bias(log_w)
    assert out.shape == (1, 3, 1, 3)
    torch.testing.assert_close(out[0, 2, 0], log_w[0])
    with torch.no_grad():
        bias.raw_scale.fill_(-30.0)
    assert bool((bias.scale > 0).all())  # never flips the sign of the weights


def test_higher_weight_means_more_attention_on_that_neighbour() -> None:
    model = _model()
    src, tgt_in, n_ids, _ = _inputs([0.5, 0.5])
    share = []
    for w in (0.1, 0.9):
        memory = model.encode_memory(src, n_ids, torch.tensor([[w, 1 - w]]))
        _, att = model.decode(tgt_in, memory, need_weights=True)
        assert att is not None
        share.append(float(att[0][:, memory.segments[0] == 0].sum().detach()))
    assert share[1] > share[0]


def test_fused_and_reference_paths_agree_and_weights_sum_to_one() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([0.6, 0.4])
    memory = model.encode_memory(src, n_ids, n_w)
    fused, none = model.decode(tgt_in, memory)
    ref, att = model.decode(tgt_in, memory, need_weights=True)
    assert none is None and att is not None
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(att.sum(-1), torch.ones(att.shape[:2]))
    assert float(att[0][:, ~memory.mask[0]].abs().sum().detach()) == 0.0


@pytest.mark.parametrize("group", [1, 3])
def test_cached_steps_equal_the_teacher_forced_pass(group: int) -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([0.6, 0.4])
    memory = model.encode_memory(src, n_ids, n_w)
    full, att_full = model.decode(tgt_in.repeat(group, 1), memory.select(torch.zeros(
        group, dtype=torch.long)), need_weights=True)
    kv = model.memory_kv(memory)
    past = None
    rows = tgt_in.repeat(group, 1)  # `group` identical hypotheses reading one memory row
    for t in range(tgt_in.size(1)):
        states, past, att = model.step(rows[:, t], t, memory, kv, past, need_weights=True,
                                       group=group)
        torch.testing.assert_close(model.project(states), full[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states, model.states(tgt_in.repeat(group, 1), memory.select(
            torch.zeros(group, dtype=torch.long)))[:, t], atol=1e-5, rtol=1e-5)
        assert att is not None and att_full is not None
        torch.testing.assert_close(att, att_full[:, t], atol=1e-6, rtol=1e-5)


def test_source_padding_does_not_change_the_output() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([0.6, 0.4])
    pad = torch.full((1, 8), CFG.pad_id)
    torch.testing.assert_close(model(src, tgt_in, n_ids, n_w),
                               model(torch.cat([src, pad], 1), tgt_in, n_ids, n_w),
                               atol=1e-5, rtol=1e-5)


def test_wrong_weight_shape_is_a_value_error() -> None:
    model = _model()
    src, tgt_in, n_ids, _ = _inputs([0.6, 0.4])
    with pytest.raises(ValueError, match="shape"):
        model(src, tgt_in, n_ids, torch.ones(1, 3))


def test_neighbour_padding_is_packed_away() -> None:
    model = _model()
    src, tgt_in, n_ids, n_w = _inputs([0.6, 0.4])
    wide = torch.cat([n_ids, torch.zeros(1, 2, 16, dtype=torch.long)], dim=2)  # more padding
    torch.testing.assert_close(model(src, tgt_in, wide, n_w), model(src, tgt_in, n_ids, n_w),
                               atol=1e-5, rtol=1e-5)
    memory = model.encode_memory(src, wide, n_w)
    real = int((src != 0).sum() + (n_ids != 0).sum())
    assert bool(memory.mask[0, :real].all()) and memory.mask.size(1) == -(-real // 8) * 8
    assert memory.ids[0, :real].tolist() == [t for t in src[0].tolist() + n_ids[0].flatten()
                                             .tolist() if t != 0]


@pytest.mark.parametrize("layers", [0, 2])
def test_neighbour_layers_choose_how_deep_neighbours_are_read(layers: int) -> None:
    model = _model(neighbour_layers=layers)
    src, tgt_in, n_ids, n_w = _inputs([0.6, 0.4])
    other = _model(neighbour_layers=1)
    assert not torch.allclose(model(src, tgt_in, n_ids, n_w), other(src, tgt_in, n_ids, n_w))
    with pytest.raises(ValueError, match="neighbour_layers"):
        DecoderConfig(n_encoder_layers=2, neighbour_layers=3)
