"""The v2 training data: new sources, the BM25-imitation pairs, the bundle and its token
table, the loss's duplicate mask and Matryoshka prefixes, in-training mining."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from encoder.dataset import Bundle, TokenTable
from encoder.lexical import _stopwords, bm25_triples, chunks, pseudo_query
from encoder.losses import InfoNCE, Matryoshka, duplicates
from encoder.mining import mine_rows
from encoder.pairs import (
    PairSource,
    gcide_definitions,
    in_dev,
    medquad_pairs,
    nli_triples,
)
from encoder.tokenizer import train_tokenizer


def test_gcide_definitions_one_entry_per_offset(data_dir: Path) -> None:
    assert gcide_definitions(data_dir) == [
        ("Zebra", "Any member of three species of African wild horses with dark bands."),
        ("Ocean", "The whole body of salt water which covers the globe; -- called also the sea."),
        ("Ocean", "One of the large bodies of water into which the great ocean is divided."),
    ]  # "Ocean wave" points at Ocean's entry: not a pair of its own


def test_medquad_dev_split_holds_whole_topics(data_dir: Path) -> None:
    train, dev = medquad_pairs(data_dir), medquad_pairs(data_dir, dev=True)
    assert len(train) + len(dev) == 30 and train and dev
    topic = {q: q.split(" fever")[0] for q, _ in train + dev}
    assert not {topic[q] for q, _ in train} & {topic[q] for q, _ in dev}
    assert in_dev("x") == in_dev("x")
    assert 0.05 < np.mean([in_dev(str(i)) for i in range(4000)]) < 0.15


def test_nli_triples_keep_the_contradiction(data_dir: Path) -> None:
    a, e, c = nli_triples(data_dir)[0]
    assert (a, e, c) == ("The dog runs in the park.", "An animal is in the park.",
                         "No dog is anywhere in the park.")


def test_chunks_and_pseudo_queries() -> None:
    text = " ".join(f"w{i}" for i in range(230))
    parts = chunks([text], max_words=100, min_words=40)
    assert [len(p.split()) for p in parts] == [100, 130]  # the 30-word tail joins
    rng, stop = __import__("random").Random(0), _stopwords()
    passage = "The zebra crossed the wide river near the old stone bridge at dawn"
    for _ in range(50):
        q = pseudo_query(passage, rng, stop)
        assert q and set(q.split()) <= set(passage.split())


# 8 commodity reports among 30 general items: 38 distinct passages
NEWS = [f"report on {w} prices and {w} exports this year" for w in
        ("copper", "wheat", "coffee", "sugar", "cotton", "tin", "zinc", "cocoa")] + \
    [f"general market news item number {i} with no commodity" for i in range(30)]


def test_bm25_triples_follow_bm25() -> None:
    passages = NEWS
    triples = bm25_triples(passages, 200, seed=1, k=10, neg_from=3)
    assert len(triples) > 100
    for q, pos, neg in triples:
        assert pos != neg and pos in passages and neg in passages
        words = {w.lower() for w in q.split()} - _stopwords()
        assert words & set(pos.lower().split()) or not words


def test_a_small_pool_gets_at_most_its_share_of_queries_and_a_large_one_all_it_asks() -> None:
    passages = NEWS + NEWS[:5]  # duplicates count once
    capped = bm25_triples(passages, 5_000, seed=1, k=10, neg_from=3, per_passage=5)
    assert 100 < len(capped) <= 5 * 38
    # where the cap does not bind, the triples are those asked for without it
    assert bm25_triples(passages, 150, seed=1, k=10, neg_from=3, per_passage=5) == \
        bm25_triples(passages, 150, seed=1, k=10, neg_from=3)


def test_retrieval_cut_across_threads_ranks_as_one_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import bm25s

    from encoder import lexical

    rng = __import__("random").Random(3)
    words = [f"w{i}" for i in range(300)]
    passages = [" ".join(rng.choices(words, k=12)) for _ in range(400)]
    queries = [" ".join(rng.choices(words, k=3)) for _ in range(1500)]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, show_progress=False), show_progress=False)
    q = bm25s.tokenize(queries, show_progress=False)
    one = lexical.retrieve(retriever, q, 10, threads=1)
    # the collection at the threshold: three threads, each over its own chunk of the queries
    monkeypatch.setattr(lexical, "THREAD_MIN_DOCS", len(passages))
    three = lexical.retrieve(retriever, q, 10, threads=3)
    assert one[0].shape == three[0].shape == (1500, 10)
    assert (one[0] == three[0]).all() and np.allclose(one[1], three[1])
    assert (one[1][:, 0] > 0).mean() > 0.9  # the queries do find something


def test_hybrid_triples_follow_the_fused_ranking() -> None:
    passages = NEWS
    favourite = passages[-1]

    calls: list[int] = []

    def encode(texts: list[str]) -> np.ndarray:  # passages first, then every query
        calls.append(len(texts))  # nearest the favourite
        if len(calls) % 2:  # two runs encode, each passages first
            v = [[1.0, 0.0] if t == favourite else [0.0, 1.0] for t in texts]
        else:
            v = [[0.9, 0.1]] * len(texts)
        v = np.asarray(v, dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    plain = bm25_triples(passages, 200, seed=1, k=10, neg_from=3)
    dense = bm25_triples(passages, 200, seed=1, k=10, neg_from=3, encode=encode,
                         dense_weight=1.0)
    lexical = bm25_triples(passages, 200, seed=1, k=10, neg_from=3, encode=encode,
                           dense_weight=0.0)
    assert len(dense) == len(plain) > 100  # the same pseudo-queries
    assert all(pos == favourite for _, pos, _ in dense)  # the encoder's ranking alone
    same = [(a[1], b[1]) for a, b in zip(plain, lexical, strict=True)
            if a[1].startswith("report") and a[1].split()[2] in a[0].split()]
    # BM25's alone where it has one best passage (a commodity named in the query)
    assert len(same) > 20 and all(a == b for a, b in same)
    assert all(neg != favourite for _, _, neg in dense)


def test_bundle_round_trip_and_token_table(tmp_path: Path) -> None:
    src = [PairSource("a", [("q one", "doc one"), ("q two", "doc one")], 0.5),
           PairSource("b", [("q one", "doc two")], 0.5, True, ["doc one"])]
    bundle = Bundle.from_sources(src)
    assert len(bundle.texts) == 4  # each distinct text once
    back = Bundle.load(bundle.save(tmp_path / "b"))
    assert back.texts == bundle.texts
    for x, y in zip(back.sources, bundle.sources, strict=True):
        assert (x.name, x.weight, x.retrieval) == (y.name, y.weight, y.retrieval)
        assert all((getattr(x, k) == getattr(y, k)).all() for k in ("q", "d", "neg"))
    assert list(back.sources[0].neg) == [-1, -1]
    assert back.texts[back.sources[1].neg[0]] == "doc one"
    tok = train_tokenizer(["q one q two doc one doc two"] * 20, vocab_size=300)
    texts = ["a much longer text than the others here", "short", "q two"]
    table = TokenTable(tok, texts, max_tokens=5)
    ids = table.batch(np.array([2, 0, 1]), max_len=4)
    want = [tok.encode(t).ids[:4] for t in (texts[2], texts[0], texts[1])]
    assert ids.shape == (3, max(map(len, want)))
    for row, w in zip(ids.tolist(), want, strict=True):
        assert row[:len(w)] == w and all(v == 0 for v in row[len(w):])


def test_token_table_cache_is_read_back_only_for_the_same_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = train_tokenizer(["q one q two doc one doc two"] * 20, vocab_size=300)
    texts = ["a much longer text than the others here", "short", "q two"]
    made = TokenTable.cached(tok, texts, 5, tmp_path)
    assert len(list(tmp_path.glob("tokens-*.npz"))) == 1
    assert not list(tmp_path.glob("*.tmp*"))
    monkeypatch.setattr(TokenTable, "__init__", lambda *a, **k: pytest.fail("tokenised again"))
    read = TokenTable.cached(tok, texts, 5, tmp_path)
    assert (read.ids == made.ids).all() and (read.offsets == made.offsets).all()
    monkeypatch.undo()
    for other in ((tok, texts, 4), (tok, [*texts[:2], "q one"], 5)):  # new key, new file
        TokenTable.cached(*other, tmp_path)
    assert len(list(tmp_path.glob("tokens-*.npz"))) == 3
    (tmp_path / "ro").mkdir()

    def refuse(*a: object, **k: object) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(np, "savez", refuse)  # a folder it cannot write (root ignores modes)
    plain = TokenTable.cached(tok, texts, 5, tmp_path / "ro")
    assert (plain.ids == made.ids).all() and not list((tmp_path / "ro").iterdir())


def test_runs_side_by_side_read_the_bundle_tokenised_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from encoder.dataset import TOKEN_CACHE, tokenise_bundle
    from encoder.train import TrainConfig, train

    src = [PairSource("a", [(f"q {i} one", f"doc {i} one") for i in range(8)], 0.5),
           PairSource("b", [(f"q {i} two", f"doc {i} two") for i in range(8)], 0.5, True)]
    folder = Bundle.from_sources(src).save(tmp_path / "bundle")
    tok = train_tokenizer(["q one q two doc one doc two 0 1 2 3 4 5 6 7"] * 20, vocab_size=300)
    tok.save(str(folder / "tokenizer.json"))
    tokenise_bundle(folder, tmp_path / "runs", 192)
    assert len(list((tmp_path / "runs" / TOKEN_CACHE).glob("tokens-*.npz"))) == 1
    monkeypatch.setattr(TokenTable, "__init__", lambda *a, **k: pytest.fail("tokenised again"))
    out = train(TrainConfig(data_dir=str(folder), out_dir=str(tmp_path / "runs/x"), steps=2,
                            batch_size=4, hard_negatives=False, device="cpu", matryoshka=[],
                            arch={"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                                  "max_tokens": 256, "vocab_size": 300}))
    assert (out / "model.safetensors").is_file()


def test_duplicates_are_left_out_of_the_loss() -> None:
    torch.manual_seed(0)
    q = F.normalize(torch.randn(3, 8), dim=-1)
    d = F.normalize(torch.randn(3, 8), dim=-1)
    d[1] = d[0]  # the same text twice: row 1's positive is also column 0
    rows = torch.tensor([10, 10, 11])
    same = duplicates(rows, rows, torch.tensor([20, 21, 22]))
    assert same.tolist() == [[False, True, False], [True, False, False],
                             [False, False, False]]
    loss = InfoNCE(symmetric=False)
    masked, _ = loss(q, d, None, same)
    logits = q @ d.T / 0.05
    logits[0, 1] = logits[1, 0] = float("-inf")
    want = F.cross_entropy(logits, torch.arange(3))
    assert masked.item() == pytest.approx(want.item(), rel=1e-5)
    plain, _ = Matryoshka(loss)(q, d)
    assert plain.item() == pytest.approx(loss(q, d)[0].item())
    cut, _ = Matryoshka(loss, (4,))(q, d)
    q4, d4 = F.normalize(q[:, :4], dim=-1), F.normalize(d[:, :4], dim=-1)
    assert cut.item() == pytest.approx((loss(q, d)[0] + loss(q4, d4)[0]).item() / 2, rel=1e-5)


def test_mined_rows_skip_the_positive_and_near_duplicates() -> None:
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    xd = F.normalize(torch.randn(40, 16), dim=-1)
    xq = F.normalize(xd[:20] + 0.1 * torch.randn(20, 16), dim=-1)
    d_rows = np.arange(100, 140)
    xd[21] = xd[0]  # a copy of query 0's positive under another row: a false negative
    pos = d_rows[:20]
    out = mine_rows(xq, xd, d_rows, pos, rng, k=10, margin=0.95)
    scores = xq @ xd.T
    for i, r in enumerate(out):
        assert r != pos[i] and r >= 0
        assert scores[i, r - 100] < 0.95 * scores[i, i]
    assert out[0] != 121


def test_a_failing_loader_raises_in_the_training_loop() -> None:
    from encoder.dataset import Source
    from encoder.train import Loader, TrainConfig

    class Broken:
        def batch(self, rows: np.ndarray, max_len: int) -> torch.Tensor:
            raise ValueError("bad rows")

    src = [Source("s", 1.0, False, np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32),
                  np.full(4, -1, dtype=np.int32))]
    loader = Loader(Broken(), src, TrainConfig("", "", batch_size=2), 0, 0, 3,  # type: ignore[arg-type]
                    pin=False)
    with pytest.raises(RuntimeError, match="loader failed") as e:
        loader.get()
    assert isinstance(e.value.__cause__, ValueError)
