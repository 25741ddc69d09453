"""Dynamic batching: embedding work from many concurrent requests, encoded together.

Requests tokenize their texts and :meth:`DynamicBatcher.embed` them; one worker thread
takes texts off the queue in arrival order into a batch bounded by ``max_size`` texts and
``max_tokens`` padded tokens, waiting at most ``max_wait_s`` after the first text for
company when other requests are under way (none by default), and runs the encoder once per
batch. While the encoder runs, new texts queue up, so under load batches fill by themselves;
a request alone (none other queued or being encoded) is never kept waiting for company that
is not coming: a 2 ms wait was most of a lone query's embedding time. Under load, a wait
left the cores idle while the texts it waited for were still being answered and sent back:
once the event loop answered fast (``api.lean.LeanRoutes``), a 2 ms wait
served 0.71 x as many requests a second as none under 32 connections, 0.77 x under 8 and
0.96 x under 64 (bench/api_load.py's load, throwaway runs, Intel Xeon, 2 cores).
A request whose texts would push the queue past ``queue_max`` is refused at once
(:class:`QueueFullError`, 429) rather than queued behind an unbounded backlog.
``max_size=1`` turns batching off. With several workers, a queue shorter than their full
batches is shared out evenly by tokens (:meth:`DynamicBatcher._share`), and a worker that
leaves texts behind wakes the next: one bulk request's texts are encoded on every core at
once.

The encoder runs in the worker thread (torch releases the GIL), so the event loop keeps
serving other requests meanwhile; results go back to each request's loop thread-safely.
A request of one text (:meth:`DynamicBatcher.embed_text`: the API's common call, a search's
query) is queued as text and tokenized in the worker, with the rest of its batch at once:
under load the event loop held the GIL most of the time, and tokenizing was a fifth of
its work on ``POST /v1/embeddings``.
With ``workers`` > 1, that many threads take batches and encode them side by side: on a
CPU with the onnx backend, each on one core (``TextEncoder.set_call_threads(1)``) rather
than every batch on all of them, whose operators wait for each other's threads (see
``api.service``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from api.errors import QueueFullError
from api.metrics import Metrics

log = logging.getLogger(__name__)
# A batch cut to share a request among workers holds at least this many texts: an encoder
# run costs about a millisecond whatever its size (encoder.text_encoder._length_groups)
LEAST_SHARE = 8
EncodeIds = Callable[[list[list[int]]], np.ndarray]
# texts -> their token ids (each cut at the encoder's limit) and whether each was cut
Tokenize = Callable[[list[str]], tuple[list[list[int]], list[bool]]]


class TextTooLongError(ValueError):
    """A text queued with ``strict`` is longer than the encoder's limit (its ids were cut)."""


@dataclass
class _Request:
    """One caller's texts: the rows fill in as their batches finish."""

    n: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    out: np.ndarray | None = None
    remaining: int = 0
    strict: bool = False  # its texts tokenized in the worker: refused when cut
    tokens: list[int] = field(default_factory=list)  # of texts tokenized in the worker
    cut: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.remaining = self.n


@dataclass
class _Text:
    ids: list[int] | None  # None: ``text``, tokenized by the worker
    request: _Request
    row: int
    size: int  # its tokens (estimated from ``text`` until tokenized): the batch's budget
    text: str = ""
    enqueued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    """Gathers texts from concurrent requests into encoder batches (see the module doc)."""

    def __init__(self, encode_ids: EncodeIds, dim: int, max_size: int = 64,
                 max_tokens: int = 8192, max_wait_s: float = 0.0, queue_max: int = 2048,
                 metrics: Metrics | None = None, workers: int = 1,
                 slots: threading.Semaphore | None = None, tokenize: Tokenize | None = None,
                 text_tokens: int = 512) -> None:
        if min(max_size, max_tokens, queue_max, workers) < 1 or max_wait_s < 0:
            raise ValueError("batcher limits must be positive")
        self.encode_ids, self.dim = encode_ids, dim
        self.max_size, self.max_tokens = max_size, max_tokens
        self.max_wait_s, self.queue_max = max_wait_s, queue_max
        self.metrics, self.slots = metrics, slots
        self.tokenize, self.text_tokens = tokenize, text_tokens
        self._queue: deque[_Text] = deque()
        self._outstanding = 0  # requests queued or being encoded (under self._cond)
        self._idle = 0  # workers waiting for texts (under self._cond)
        self._cond = threading.Condition()
        self._stopped = False
        self._threads = [threading.Thread(target=self._run, name=f"qkv-encoder-{i}",
                                          daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def depth(self) -> int:
        """Texts waiting (not yet taken into a batch)."""
        return len(self._queue)

    async def embed(self, ids: Sequence[list[int]]) -> np.ndarray:
        """Encode token id lists (from ``TextEncoder.tokenize``); (n, dim) float32 rows in
        the encoder's raw output (callers normalise). Raises :class:`QueueFullError` when
        the queue cannot take them."""
        loop = asyncio.get_running_loop()
        request = _Request(len(ids), loop, loop.create_future())
        if not ids:
            return np.zeros((0, self.dim), np.float32)
        self._put(request, [_Text(list(x), request, row, len(x)) for row, x in enumerate(ids)])
        return await request.future

    async def embed_text(self, text: str, strict: bool) -> tuple[np.ndarray, int, bool]:
        """Encode one text, tokenized in the worker (needs ``tokenize``): its (dim,) row,
        its token count and whether it was cut at the encoder's limit. ``strict``: raise
        :class:`TextTooLongError` instead of encoding a cut text."""
        if self.tokenize is None:
            raise RuntimeError("this batcher was made without a tokenizer")
        loop = asyncio.get_running_loop()
        request = _Request(1, loop, loop.create_future(), strict=strict, tokens=[0],
                           cut=[False])
        # its budget until tokenized: about three characters a token, at most the limit
        size = min(len(text) // 3 + 2, self.text_tokens)
        self._put(request, [_Text(None, request, 0, size, text)])
        out = await request.future
        return out[0], request.tokens[0], request.cut[0]

    def _put(self, request: _Request, texts: list[_Text]) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError("the encoder is shut down")
            self._check_room(len(texts))
            self._queue.extend(texts)
            self._outstanding += 1
            self._set_depth()
            self._cond.notify()

    def admit(self, n: int) -> None:
        """Raise :class:`QueueFullError` (counted as rejected) when ``n`` more texts would
        not fit in the queue now: for work on the encoder outside the queue, refused as
        the queue's own texts would be."""
        with self._cond:
            self._check_room(n)

    def _check_room(self, n: int) -> None:  # under self._cond
        if len(self._queue) + n > self.queue_max:
            if self.metrics:
                self.metrics.rejected.inc(n)
            raise QueueFullError(
                f"the encoder queue is full ({len(self._queue)} texts waiting, at most "
                f"{self.queue_max}); retry shortly")

    def close(self) -> None:
        """Stop the worker after the batch in progress; waiting requests get an error."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        for t in self._queue:
            self._fail(t.request, RuntimeError("the encoder was shut down"))
        self._queue.clear()

    def _set_depth(self) -> None:
        if self.metrics:
            self.metrics.queue_depth.set(len(self._queue))

    def _take(self, block: bool = True) -> list[_Text] | None:
        """The next batch (FIFO, within the limits), waiting for company; None = stop.
        Not ``block``: an empty batch at once when there is nothing to take."""
        with self._cond:
            while True:
                if not block and not self._queue:
                    return None if self._stopped else []
                self._idle_wait()
                if self._stopped:
                    return None
                # company only while other requests are under way: one alone goes now
                wait = self.max_wait_s if self._outstanding > 1 else 0.0
                deadline = self._queue[0].enqueued + wait
                while self._queue and len(self._queue) < self.max_size and not self._stopped:
                    longest = max(t.size for t in self._queue)
                    if longest * len(self._queue) >= self.max_tokens:
                        break
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._queue:  # else another worker took them: wait again
                    break
            batch: list[_Text] = []
            longest, taken, share = 0, 0, self._share()
            while self._queue and len(batch) < self.max_size and (
                    taken < share or len(batch) < LEAST_SHARE):
                nxt = max(longest, self._queue[0].size)
                if batch and nxt * (len(batch) + 1) > self.max_tokens:
                    break
                longest = nxt
                batch.append(self._queue.popleft())
                taken += batch[-1].size
            self._set_depth()
            if self._queue:
                self._cond.notify()  # the rest is another worker's, not this one's next
            return batch

    def _idle_wait(self) -> None:  # under self._cond
        """Wait until there are texts or a stop, counted among the idle workers."""
        while not self._queue and not self._stopped:
            self._idle += 1
            try:
                self._cond.wait()
            finally:
                self._idle -= 1

    def _share(self) -> float:  # under self._cond
        """How many tokens this batch takes (it stops at ``max_size`` texts anyway): all it
        can, or while other workers wait for work and fewer texts are queued than this one
        and they would take in full batches, an even share of the queue's tokens (but at
        least :data:`LEAST_SHARE` texts). One bulk request of 80 texts was cut 64 + 16, and
        its client waited for the 64 on one core while the other core's 16 were long done;
        cut 40 + 40 by count, one worker still had the 40 longest (a request's texts come
        longest first), twice the other's tokens on manual pages."""
        workers = self._idle + 1
        if workers == 1 or len(self._queue) >= self.max_size * workers:
            return math.inf
        return sum(t.size for t in self._queue) / workers

    def _next(self) -> list[_Text] | None:
        """The next batch; with ``slots`` (shared with other encoders' batchers), taken only
        once this worker holds a slot, so texts that queued meanwhile join it (the caller
        releases the slot after encoding)."""
        if self.slots is None:
            return self._take()
        while True:
            with self._cond:
                self._idle_wait()
                if self._stopped:
                    return None
            self.slots.acquire()
            batch = self._take(block=False)
            if batch:
                return batch
            self.slots.release()  # a sibling worker took them
            if batch is None:
                return None

    def _run(self) -> None:
        while (batch := self._next()) is not None:
            try:
                self._encode(batch)
            finally:
                if self.slots is not None:
                    self.slots.release()

    def _tokenized(self, batch: list[_Text]) -> list[_Text]:
        """The batch with its texts tokenized (in one call): those of requests refused
        meanwhile (a strict text cut, the tokenizer failing) left out."""
        raw = [t for t in batch if t.ids is None]
        if raw and self.tokenize is not None:
            try:
                ids, cut = self.tokenize([t.text for t in raw])
                if not len(ids) == len(cut) == len(raw):  # no text left without an answer
                    raise RuntimeError(f"the tokenizer answered {len(ids)} of {len(raw)} texts")
            except Exception as e:
                log.exception("tokenizing %d texts failed", len(raw))
                for t in raw:
                    self._fail(t.request, e)
                ids, cut = [], []
            for t, x, c in zip(raw, ids, cut, strict=False):
                r = t.request
                if c and r.strict:
                    self._fail(r, TextTooLongError(t.row))
                    continue
                t.ids, t.size, r.tokens[t.row], r.cut[t.row] = x, len(x), len(x), c
        return [t for t in batch if t.ids is not None and t.request.remaining > 0]

    def _encode(self, batch: list[_Text]) -> None:
        batch = self._tokenized(batch)
        if not batch:
            return
        t0 = time.perf_counter()
        try:
            vectors = self.encode_ids([t.ids for t in batch])  # type: ignore[misc]
        except Exception as e:  # the requests in this batch fail, the worker goes on
            log.exception("encoder batch of %d failed", len(batch))
            for t in batch:
                self._fail(t.request, e)
            return
        if self.metrics:
            self.metrics.batch_seconds.observe(time.perf_counter() - t0)
            self.metrics.batch_texts.observe(len(batch))
            self.metrics.batch_tokens.observe(len(batch) * max(t.size for t in batch))
        for t, row in zip(batch, vectors, strict=True):
            r = t.request
            if r.out is None:
                r.out = np.empty((r.n, self.dim), np.float32)
            r.out[t.row] = row
            r.remaining -= 1
            if r.remaining == 0:
                self._done()
                r.loop.call_soon_threadsafe(_resolve, r.future, r.out)

    def _done(self) -> None:
        with self._cond:
            self._outstanding -= 1

    def _fail(self, request: _Request, e: BaseException) -> None:
        if request.remaining > 0:
            request.remaining = 0
            self._done()
            request.loop.call_soon_threadsafe(_reject, request.future, e)


def _resolve(future: asyncio.Future[np.ndarray], value: np.ndarray) -> None:
    if not future.done():  # the client may have gone away (cancelled)
        future.set_result(value)


def _reject(future: asyncio.Future[np.ndarray], e: BaseException) -> None:
    if not future.done():
        future.set_exception(e)
