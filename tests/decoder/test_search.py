import pytest
import torch

from decoder import DecoderConfig, RetrievalAugmentedTransformer
from decoder import batch as batching
from decoder.search import beam_search, greedy

CFG = DecoderConfig(vocab_size=40, d_model=32, n_encoder_layers=1, n_decoder_layers=2,
                    n_heads=2, d_ff=64, max_tokens=24, dropout=0.0)


@pytest.fixture(scope="module")
def model() -> RetrievalAugmentedTransformer:
    torch.manual_seed(3)
    m = RetrievalAugmentedTransformer(CFG).eval()
    with torch.no_grad():  # a peakier output distribution than at init, </s> likely enough
        m.embed.weight.mul_(4.0)
    return m


def _memory(model: RetrievalAugmentedTransformer, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    srcs = [torch.randint(5, CFG.vocab_size, (3 + i % 5,), generator=g).tolist()
            for i in range(n)]
    nbrs = [[torch.randint(5, CFG.vocab_size, (4,), generator=g).tolist()] * (i % 3)
            for i in range(n)]
    weights = [[1.0 / max(1, i % 3)] * (i % 3) for i in range(n)]
    n_ids, n_w = batching.neighbours(nbrs, weights, CFG)
    return model.encode_memory(batching.sources(srcs, CFG), n_ids, n_w)


def _sequence_log_prob(model: RetrievalAugmentedTransformer, memory, row: int,
                       ids: list[int]) -> float:
    """Teacher-forced log p(ids </s>) under the search's rules (no pad/bos/sep)."""
    c = model.config
    tgt_in, tgt_out = batching.targets([ids], c)
    logits, _ = model.decode(tgt_in, memory.select(torch.tensor([row])))
    lp = torch.log_softmax(logits.float(), -1)[0]
    return float(sum(lp[t, tgt_out[0, t]] for t in range(len(ids) + 1)))


@torch.no_grad()
def test_beam_of_one_is_greedy(model: RetrievalAugmentedTransformer) -> None:
    memory = _memory(model, 8)
    limits = [12] * 8
    g = greedy(model, memory, limits)
    b = beam_search(model, memory, limits, beam=1)
    assert [h.ids for h in g] == [h.ids for h in b]
    assert [h.finished for h in g] == [h.finished for h in b]
    for x, y in zip(g, b, strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-4)


@torch.no_grad()
def test_beam_finds_at_least_greedys_log_prob(model: RetrievalAugmentedTransformer) -> None:
    memory = _memory(model, 12)
    limits = [10] * 12
    g = greedy(model, memory, limits)
    b = beam_search(model, memory, limits, beam=4, length_penalty=0.0)
    assert any(x.ids != y.ids for x, y in zip(g, b, strict=True))  # beam does change things
    for row, (x, y) in enumerate(zip(g, b, strict=True)):
        assert y.score >= x.score - 1e-4
        # the reported score is the sequence's real log-probability
        assert y.score == pytest.approx(_sequence_log_prob(model, memory, row, y.ids), abs=1e-3)
        assert x.score == pytest.approx(_sequence_log_prob(model, memory, row, x.ids), abs=1e-3)


@torch.no_grad()
def test_greedy_equals_argmax_without_cache(model: RetrievalAugmentedTransformer) -> None:
    memory = _memory(model, 3)
    for row, h in enumerate(greedy(model, memory, [10] * 3)):
        ids: list[int] = []
        mem = memory.select(torch.tensor([row]))
        for _ in range(10):
            tgt_in, _ = batching.targets([ids], CFG)
            logits, _ = model.decode(tgt_in, mem)
            lp = logits[0, len(ids)].clone()
            lp[[CFG.pad_id, CFG.bos_id, CFG.sep_id]] = float("-inf")
            nxt = int(lp.argmax())
            if nxt == CFG.eos_id:
                break
            ids.append(nxt)
        assert h.ids == ids


@torch.no_grad()
@pytest.mark.parametrize("beam", [1, 3])
def test_length_limit_and_unfinished_flag(model: RetrievalAugmentedTransformer,
                                          beam: int) -> None:
    memory = _memory(model, 6)
    limits = [0, 1, 2, 3, 4, 5]
    search = greedy if beam == 1 else beam_search
    hyps = search(model, memory, limits) if beam == 1 else beam_search(model, memory, limits, 3)
    assert search is not None
    for h, limit in zip(hyps, limits, strict=True):
        assert len(h.ids) <= limit
        assert h.finished or len(h.ids) == limit
        assert not set(h.ids) & {CFG.pad_id, CFG.bos_id, CFG.sep_id, CFG.eos_id}
    assert hyps[0].ids == [] and not hyps[0].finished


@torch.no_grad()
def test_a_sentence_decodes_the_same_alone_and_in_a_batch(
    model: RetrievalAugmentedTransformer,
) -> None:
    memory = _memory(model, 7)
    together = beam_search(model, memory, [9] * 7, beam=3)
    for row in range(7):
        alone = beam_search(model, memory.select(torch.tensor([row])), [9], beam=3)[0]
        assert alone.ids == together[row].ids
        assert alone.score == pytest.approx(together[row].score, abs=1e-4)


@torch.no_grad()
def test_attention_rows_follow_the_output(model: RetrievalAugmentedTransformer) -> None:
    memory = _memory(model, 4)
    for search_beam in (1, 3):
        hyps = (greedy(model, memory, [8] * 4, need_weights=True) if search_beam == 1 else
                beam_search(model, memory, [8] * 4, beam=search_beam, need_weights=True))
        for row, h in enumerate(hyps):
            if not h.ids:
                continue
            assert h.attention is not None and h.attention.shape == (len(h.ids),
                                                                     memory.mask.size(1))
            _, att = model.decode(batching.targets([h.ids], CFG)[0],
                                  memory.select(torch.tensor([row])), need_weights=True)
            assert att is not None
            torch.testing.assert_close(h.attention, att[0, : len(h.ids)], atol=1e-5, rtol=1e-4)


def test_beam_must_be_positive(model: RetrievalAugmentedTransformer) -> None:
    with pytest.raises(ValueError, match="beam"):
        beam_search(model, _memory(model, 1), [3], beam=0)
