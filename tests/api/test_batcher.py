"""The dynamic batcher on its own: concurrent texts share batches, results go back to
their own request and row, limits hold, errors reach the right callers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from api.batcher import DynamicBatcher, TextTooLongError
from api.errors import QueueFullError
from api.metrics import Metrics


class SlowEncoder:
    """Vector of a text = [first id, length, 0...]; records each batch; takes 20 ms."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[list[int]]] = []
        self.fail_on = fail_on

    def __call__(self, ids: list[list[int]]) -> np.ndarray:
        self.batches.append(ids)
        time.sleep(0.02)
        if self.fail_on is not None and any(x[0] == self.fail_on for x in ids):
            raise RuntimeError("boom")
        out = np.zeros((len(ids), 4), np.float32)
        for r, x in enumerate(ids):
            out[r, :2] = (x[0], len(x))
        return out


class Concurrency:
    """Wraps encoders to count how many of their calls run at once (``peak``)."""

    def __init__(self) -> None:
        import threading

        self.running, self.peak, self.lock = 0, 0, threading.Lock()

    def wrap(self, inner: SlowEncoder) -> Any:
        def encode(ids: list[list[int]]) -> np.ndarray:
            with self.lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            try:
                return inner(ids)
            finally:
                with self.lock:
                    self.running -= 1
        return encode


async def _many(b: DynamicBatcher, requests: list[list[list[int]]]) -> list[np.ndarray]:
    return list(await asyncio.gather(*(b.embed(r) for r in requests)))


def test_32_concurrent_single_texts_share_batches() -> None:
    enc, metrics = SlowEncoder(), Metrics()
    b = DynamicBatcher(enc, 4, max_size=64, max_wait_s=0.005, metrics=metrics)
    requests = [[[i, 1, 2]] for i in range(32)]
    results = asyncio.run(_many(b, requests))
    b.close()
    assert [r[0, 0] for r in results] == list(range(32))  # each got its own vector
    assert len(enc.batches) <= 3 and sum(len(x) for x in enc.batches) == 32
    text = metrics.render().decode()
    assert f"qkv_encoder_batch_texts_count {len(enc.batches)}.0" in text
    assert "qkv_encoder_batch_texts_sum 32.0" in text


def test_a_request_alone_does_not_wait_for_company() -> None:
    """With nothing else under way there is no company to wait for: a lone request is
    encoded at once (it waited the whole ``max_wait_s`` before), one after another; two
    requests queued together still wait for more, as before."""
    enc = SlowEncoder()
    b = DynamicBatcher(enc, 4, max_size=64, max_wait_s=0.5)

    async def alone() -> list[float]:
        took = []
        for i in range(3):
            t0 = time.perf_counter()
            await b.embed([[i, 1]])
            took.append(time.perf_counter() - t0)
        return took

    assert max(asyncio.run(alone())) < 0.25  # 20 ms of encoding, not 500 ms of waiting

    async def busy() -> float:
        first = asyncio.ensure_future(b.embed([[1]]))
        await asyncio.sleep(0.005)  # the first is being encoded; two more queue meanwhile
        t0 = time.perf_counter()
        await asyncio.gather(b.embed([[2]]), b.embed([[3]]))
        await first
        return time.perf_counter() - t0

    assert asyncio.run(busy()) >= 0.4  # two under way: they wait for more company
    b.close()
    assert [len(x) for x in enc.batches] == [1, 1, 1, 1, 2]


def test_batch_size_one_is_one_by_one() -> None:
    enc = SlowEncoder()
    b = DynamicBatcher(enc, 4, max_size=1)
    asyncio.run(_many(b, [[[i]] for i in range(8)]))
    b.close()
    assert [len(x) for x in enc.batches] == [1] * 8


def test_token_budget_and_row_order() -> None:
    enc = SlowEncoder()
    b = DynamicBatcher(enc, 4, max_size=64, max_tokens=40, max_wait_s=0.01)
    req = [[k] + [0] * (n - 1) for k, n in enumerate([10, 3, 20, 5, 9, 1])]
    (out,) = asyncio.run(_many(b, [req]))
    b.close()
    np.testing.assert_array_equal(out[:, 0], np.arange(6))
    np.testing.assert_array_equal(out[:, 1], [10, 3, 20, 5, 9, 1])
    for batch in enc.batches:  # padded tokens within the budget (or a single text)
        assert len(batch) == 1 or len(batch) * max(map(len, batch)) <= 40


def test_queue_full_and_failures() -> None:
    enc = SlowEncoder(fail_on=7)
    b = DynamicBatcher(enc, 4, max_size=2, queue_max=3)

    async def scenario() -> None:
        with pytest.raises(QueueFullError):
            await b.embed([[1], [2], [3], [4]])
        with pytest.raises(RuntimeError, match="boom"):
            await b.embed([[7]])
        ok = await b.embed([[5], [6]])  # the worker survived the failure
        assert ok[:, 0].tolist() == [5, 6]
        assert (await b.embed([])).shape == (0, 4)

    asyncio.run(scenario())
    b.close()


def test_two_workers_encode_batches_side_by_side() -> None:
    """``workers=2``: two batches run at once (the service runs one per core on a CPU), each
    text still comes back to its own request and row, and no batch is empty."""
    inner, count = SlowEncoder(), Concurrency()
    encode = count.wrap(inner)
    b = DynamicBatcher(encode, 4, max_size=4, max_wait_s=0.001, workers=2)
    requests = [[[i, 7], [100 + i]] for i in range(24)]  # two texts each
    results = asyncio.run(_many(b, requests))
    b.close()
    assert count.peak == 2  # one batch alone would take 12 x 20 ms in a row
    assert [r[:, 0].tolist() for r in results] == [[i, 100 + i] for i in range(24)]
    assert [r[:, 1].tolist() for r in results] == [[2, 1]] * 24
    assert all(inner.batches) and sum(len(x) for x in inner.batches) == 48
    with pytest.raises(ValueError, match="positive"):
        DynamicBatcher(encode, 4, workers=0)


@pytest.mark.parametrize("slots", [False, True])
def test_one_bulk_request_is_shared_evenly_between_workers(slots: bool) -> None:
    """One request of 80 texts, two workers (as the service runs on 2 cores, with its
    per-core slots or without): two batches of 40 encoded at once, not 64 then 16 on one
    worker while the other sleeps; a request under two shares stays one batch."""
    import threading

    inner, count = SlowEncoder(), Concurrency()
    b = DynamicBatcher(count.wrap(inner), 4, max_size=64, max_wait_s=0.0, workers=2,
                       slots=threading.Semaphore(2) if slots else None)
    deadline = time.monotonic() + 5
    while b._idle < 2 and time.monotonic() < deadline:  # both workers started and waiting
        time.sleep(0.001)
    out = asyncio.run(b.embed([[i, 1] for i in range(80)]))
    assert count.peak == 2 and sorted(len(x) for x in inner.batches) == [40, 40]
    assert out[:, 0].tolist() == list(range(80))
    inner.batches.clear()
    time.sleep(0.05)  # both back to waiting
    asyncio.run(b.embed([[i] for i in range(12)]))  # 12 texts: shares of at least 8
    assert sorted(len(x) for x in inner.batches) in ([12], [4, 8], [6, 6])
    inner.batches.clear()
    asyncio.run(b.embed([[i] for i in range(7)]))
    b.close()
    assert [len(x) for x in inner.batches] == [7]


def test_a_bulk_request_is_shared_by_tokens_not_by_texts() -> None:
    """A request's texts come longest first (``Service.embed``): 20 texts of 30 tokens, then
    60 of 10. Cut by count (40 + 40), one worker had 700 tokens and the other 500; by tokens,
    each has 600."""
    import threading

    inner = SlowEncoder()
    b = DynamicBatcher(inner, 4, max_size=64, max_wait_s=0.0, workers=2,
                       slots=threading.Semaphore(2))
    deadline = time.monotonic() + 5
    while b._idle < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    texts = [[i] * 30 for i in range(20)] + [[i] * 10 for i in range(20, 80)]
    out = asyncio.run(b.embed(texts))
    b.close()
    assert out[:, 0].tolist() == list(range(80))
    assert sorted(sum(len(t) for t in x) for x in inner.batches) == [600, 600]
    assert sorted(len(x) for x in inner.batches) == [20, 60]


def test_batchers_sharing_slots_run_no_more_batches_than_slots() -> None:
    """Two encoders' batchers (two workers each) sharing one slot: one batch at a time in
    all, no empty batch (a worker that finds its queue emptied gives the slot back), every
    text back to its request."""
    import threading

    slots, count = threading.Semaphore(1), Concurrency()
    encoders = [SlowEncoder(), SlowEncoder()]
    batchers = [DynamicBatcher(count.wrap(e), 4, max_wait_s=0.0, workers=2, slots=slots)
                for e in encoders]

    async def both() -> list[list[np.ndarray]]:
        return list(await asyncio.gather(*(_many(b, [[[i + 1000 * k]] for i in range(20)])
                                           for k, b in enumerate(batchers))))

    results = asyncio.run(both())
    for b in batchers:
        b.close()
    assert count.peak == 1
    for k, (enc, res) in enumerate(zip(encoders, results, strict=True)):
        assert [r[0, 0] for r in res] == [i + 1000 * k for i in range(20)]
        assert sum(len(x) for x in enc.batches) == 20 and all(enc.batches)
    assert sum(len(e.batches) for e in encoders) <= 8  # 40 texts: batches, not one by one


class WordTokenizer:
    """Ids of a text = [its word count, then 1 a word], cut at ``limit``; records each call
    and the thread it ran in; fails on a text "boom"."""

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit
        self.calls: list[list[str]] = []
        self.threads: set[str] = set()

    def __call__(self, texts: list[str]) -> tuple[list[list[int]], list[bool]]:
        import threading

        self.calls.append(list(texts))
        self.threads.add(threading.current_thread().name)
        if "boom" in texts:
            raise RuntimeError("tokenizer boom")
        ids = [[len(t.split())] + [1] * len(t.split()) for t in texts]
        return [x[:self.limit] for x in ids], [len(x) > self.limit for x in ids]


def test_single_texts_are_tokenized_in_the_worker_with_their_batch() -> None:
    """``embed_text``: the text is tokenized in the encoder's thread, with the rest of its
    batch in one call (the event loop held the GIL most of the time under load, and
    tokenizing was a fifth of its work), and comes back with its token count and whether
    it was cut; texts already tokenized share the batch."""
    enc, tok = SlowEncoder(), WordTokenizer()
    b = DynamicBatcher(enc, 4, max_size=64, max_wait_s=0.005, tokenize=tok, text_tokens=5)

    async def scenario() -> list[Any]:
        first = asyncio.ensure_future(b.embed_text("a", strict=False))
        await asyncio.sleep(0.005)  # being encoded: the rest queue meanwhile
        rest = [b.embed_text(" ".join(["w"] * n), strict=False) for n in range(1, 9)]
        return [await first, *await asyncio.gather(*rest, b.embed([[42, 1, 1]]))]

    first, *texts, ids = asyncio.run(scenario())
    b.close()
    assert "MainThread" not in tok.threads and len(tok.calls) == 2  # ["a"], then 8 at once
    assert [len(c) for c in tok.calls] == [1, 8]
    for n, (row, tokens, cut) in enumerate(texts, start=1):
        assert (row[0], row[1], tokens, cut) == (n, min(n + 1, 5), min(n + 1, 5), n + 1 > 5)
    assert first[1:] == (2, False) and ids[0, :2].tolist() == [42, 3]
    assert sorted(len(x) for x in enc.batches) == [1, 9]


def test_a_strict_text_too_long_or_a_tokenizer_failure_refuses_only_its_request() -> None:
    enc, tok = SlowEncoder(), WordTokenizer()
    b = DynamicBatcher(enc, 4, max_size=64, max_wait_s=0.02, tokenize=tok, text_tokens=5)

    async def scenario() -> list[Any]:
        first = asyncio.ensure_future(b.embed_text("a", strict=True))
        await asyncio.sleep(0.005)
        return [await first, *await asyncio.gather(
            b.embed_text("w w w w w w w", strict=True), b.embed_text("w w", strict=True),
            return_exceptions=True)]

    _, too_long, ok = asyncio.run(scenario())
    assert isinstance(too_long, TextTooLongError) and ok[1:] == (3, False)
    assert [len(x) for x in enc.batches] == [1, 1]  # the refused text was not encoded

    async def failing() -> list[Any]:
        return list(await asyncio.gather(b.embed_text("boom", strict=False),
                                         return_exceptions=True))

    (err,) = asyncio.run(failing())
    assert isinstance(err, RuntimeError) and "tokenizer boom" in str(err)
    row, tokens, _ = asyncio.run(b.embed_text("still here", strict=False))  # the worker lives
    assert tokens == 3 and row[0] == 2
    b.close()
    plain = DynamicBatcher(enc, 4)
    with pytest.raises(RuntimeError, match="without a tokenizer"):
        asyncio.run(plain.embed_text("x", strict=False))
    plain.close()


def test_adapt_re_embedding_is_cut_into_runs_in_order() -> None:
    from wiring.adapter import _chunks

    texts = [str(i) for i in range(300)]
    for workers, runs in ((1, 1), (2, 2), (8, 4)):  # none under 64 texts
        cut = _chunks(texts, workers)
        assert len(cut) == runs and sum(cut, []) == texts
    assert _chunks(texts[:100], 2) == [texts[:100]] and _chunks([], 2) == [[]]
