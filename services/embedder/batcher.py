"""Dynamic micro-batching: concurrent Embed calls from any number of clients share batches.

Texts arrive already tokenized (so their lengths are known) and wait in two queues, queries
before documents, so a bulk write does not stall a search. Each of the provider's `concurrency`
inference threads takes its next batch itself (`batching.pick_batch`) the moment it finishes the
last one, and hands the vectors back to the event loop in one callback per batch. So
`session.run` never blocks the event loop, the next requests are received and tokenized while a
batch runs, and a busy event loop never delays the start of the next batch: under 32 clients,
dispatching each batch through the loop had left every inference thread idle 7% of the time
(docs/PERFORMANCE.md). While the threads are busy, waiting texts pile up and the next batch is
naturally bigger; when one is idle, a partial batch waits at most `max_wait_ms` and only when
more texts are expected (the previous batch was bigger), so a lone caller never pays for batching.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from hypermnesia.errors import HypermnesiaError, ResourceExhausted, Unavailable
from services.embedder import metrics
from services.embedder.batching import pick_batch
from services.embedder.errors import BatchFailed
from services.embedder.provider import EmbeddingProvider, Prepared

log = logging.getLogger(__name__)

T = TypeVar("T")

# How many queued texts from the head of each queue are considered when grouping by length.
_WINDOW_PER_SLOT = 4


def _shutting_down() -> Unavailable:
    return Unavailable("the embedder is shutting down; retry on another replica")


@dataclass(eq=False)
class _Request:
    future: asyncio.Future[np.ndarray]
    vectors: np.ndarray
    remaining: int


@dataclass(eq=False, slots=True)
class _Item:
    request: _Request
    row: int
    prepared: Prepared
    enqueued: float


@dataclass(eq=False)
class _Exclusive:
    """Work that needs an inference thread to itself (the cross-encoder shares the cores)."""

    work: Callable[[], Any]
    future: asyncio.Future[Any] = field(repr=False)


class Batcher:
    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        max_batch_size: int,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_queue: int,
    ) -> None:
        self.provider = provider
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000
        self.max_queue = max_queue
        # Everything below is shared with the inference threads and guarded by this condition.
        self._work = threading.Condition()
        self._urgent: deque[_Item] = deque()
        self._bulk: deque[_Item] = deque()
        self._exclusive: deque[_Exclusive] = deque()
        self._running: dict[int, list[_Item]] = {}  # batches on an inference thread, by thread id
        self._queued_tokens = 0
        self._expected = 1  # size of the previous batch: how many texts a partial batch waits for
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def depth(self) -> int:
        return len(self._urgent) + len(self._bulk)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Daemon threads: one stuck in inference must not keep a stopping process alive.
        for n in range(max(1, self.provider.concurrency)):
            threading.Thread(target=self._serve, name=f"embed_{n}", daemon=True).start()

    async def close(self) -> None:
        """Answer every waiting and running caller with UNAVAILABLE at once. A batch still on
        its thread finishes there (inference cannot be interrupted); its vectors are dropped."""
        with self._work:
            self._closed = True
            waiting = [*self._urgent, *self._bulk, *(i for b in self._running.values() for i in b)]
            exclusive = list(self._exclusive)
            self._urgent.clear()
            self._bulk.clear()
            self._exclusive.clear()
            self._queued_tokens = 0
            self._work.notify_all()
        self._set_depth()
        for request in {id(i.request): i.request for i in waiting}.values():
            self._fail(request, _shutting_down())
        for job in exclusive:
            if not job.future.done():
                job.future.set_exception(_shutting_down())

    async def submit(self, prepared: list[Prepared], *, urgent: bool = False) -> np.ndarray:
        """Vectors for `prepared`, one row each, in order. Raises ResourceExhausted at once when the
        queue cannot take them, and the batch's error when inference fails."""
        if not prepared:
            return np.zeros((0, self.provider.info.dimension), dtype=np.float32)
        loop = asyncio.get_running_loop()
        request = _Request(
            future=loop.create_future(),
            vectors=np.empty((len(prepared), self.provider.info.dimension), dtype=np.float32),
            remaining=len(prepared),
        )
        now = time.perf_counter()
        with self._work:
            if self._closed:
                raise _shutting_down()
            depth = self.depth
            if depth + len(prepared) > self.max_queue:
                metrics.REJECTED.inc()
                raise ResourceExhausted(
                    f"the embedder is busy ({depth:,} texts waiting, limit {self.max_queue:,} "
                    "HM_EMBED_MAX_QUEUE); retry with backoff or add a replica"
                )
            queue = self._urgent if urgent else self._bulk
            queue.extend(_Item(request, row, p, now) for row, p in enumerate(prepared))
            self._queued_tokens += sum(p.tokens for p in prepared)
            self._work.notify()
        self._set_depth()
        try:
            return await request.future
        except asyncio.CancelledError:
            # The caller gave up (deadline, disconnect): its texts must not cost a batch slot.
            self._drop(request)
            raise

    async def run_exclusive(self, work: Callable[[], T]) -> T:
        """Run `work` on an inference thread, before the next batch it would have taken."""
        job = _Exclusive(work, asyncio.get_running_loop().create_future())
        with self._work:
            if self._closed:
                raise _shutting_down()
            self._exclusive.append(job)
            self._work.notify()
        return await job.future

    # -- the inference threads ---------------------------------------------------------------

    def _serve(self) -> None:
        me = threading.get_ident()
        while True:
            with self._work:
                self._running.pop(me, None)
                work = self._next_work()
                if isinstance(work, list):
                    self._running[me] = work
            if work is None:
                return
            self._set_depth()
            if isinstance(work, _Exclusive):
                self._run_exclusive(work)
                continue
            try:
                self._run(work)
            except Exception:  # a bug outside inference: its callers get an error, not a hang
                log.exception("embedding batch of %d texts failed outside inference", len(work))
                failed = BatchFailed(
                    "the embedding batch this request was part of failed; see the embedder log"
                )
                self._to_loop(self._fail_batch, work, failed)

    def _next_work(self) -> _Exclusive | list[_Item] | None:
        """Under the lock: the next exclusive job or batch, waiting while there is none; None
        once the batcher is closed."""
        while not self._closed:
            if self._exclusive:
                return self._exclusive.popleft()
            if not self.depth:
                self._work.wait()
                continue
            delay = self._fill_delay()
            if delay > 0:
                self._work.wait(delay)
                continue
            batch = self._take()
            if self.depth:
                self._work.notify()  # what this batch left behind is another thread's to take
            return batch
        return None

    def _fill_delay(self) -> float:
        """Seconds a partial batch should still wait to fill up: only while more texts are
        expected and not past max_wait_ms after the oldest one arrived."""
        target = min(self._expected, self.max_batch_size)
        if self.depth >= target or self._queued_tokens >= self.max_batch_tokens:
            return 0.0
        oldest = min(q[0].enqueued for q in (self._urgent, self._bulk) if q)
        return oldest + self.max_wait_s - time.perf_counter()

    def _take(self) -> list[_Item]:
        window = self.max_batch_size * _WINDOW_PER_SLOT
        urgent = [self._urgent[i] for i in range(min(window, len(self._urgent)))]
        bulk = [self._bulk[i] for i in range(min(window, len(self._bulk)))]
        candidates = urgent + bulk
        chosen = pick_batch(
            [c.prepared.tokens for c in candidates],
            0,  # the oldest query if any, else the oldest document
            max_size=self.max_batch_size,
            max_tokens=self.max_batch_tokens,
        )
        picked = {id(candidates[i]) for i in chosen}
        self._urgent = deque(i for i in self._urgent if id(i) not in picked)
        self._bulk = deque(i for i in self._bulk if id(i) not in picked)
        batch = [candidates[i] for i in sorted(chosen)]
        self._queued_tokens -= sum(i.prepared.tokens for i in batch)
        self._expected = len(batch)
        return batch

    def _run(self, batch: list[_Item]) -> None:
        started = time.perf_counter()
        for item in batch:
            metrics.QUEUE_WAIT.observe(started - item.enqueued)
        metrics.BATCH_SIZE.observe(len(batch))
        metrics.BATCH_TOKENS.observe(len(batch) * max(i.prepared.tokens for i in batch))
        try:
            vectors = self.provider.embed([i.prepared for i in batch])
            if vectors.shape[0] != len(batch):
                raise RuntimeError(f"the provider returned {vectors.shape[0]} vectors for {len(batch)} texts")
        except Exception as exc:
            metrics.BATCH_FAILURES.inc()
            log.error("embedding batch of %d texts failed", len(batch), exc_info=exc)
            error = (
                exc
                if isinstance(exc, HypermnesiaError)
                else BatchFailed("the embedding batch this request was part of failed; see the embedder log")
            )
            self._to_loop(self._fail_batch, batch, error)
            return
        finally:
            metrics.INFERENCE.observe(time.perf_counter() - started)
        metrics.TEXTS.inc(len(batch))
        self._to_loop(self._deliver, batch, vectors)

    def _run_exclusive(self, job: _Exclusive) -> None:
        try:
            result = job.work()
        except BaseException as exc:  # handed to the caller, as run_in_executor would
            self._to_loop(_settle, job.future, None, exc)
        else:
            self._to_loop(_settle, job.future, result, None)

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None, "start() the batcher first"
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is gone: the process is exiting and nobody is waiting any more

    # -- on the event loop -------------------------------------------------------------------

    @staticmethod
    def _deliver(batch: list[_Item], vectors: np.ndarray) -> None:
        for row, item in enumerate(batch):
            request = item.request
            if request.future.done():  # cancelled, failed, or answered at shutdown
                continue
            request.vectors[item.row] = vectors[row]
            request.remaining -= 1
            if request.remaining == 0:
                request.future.set_result(request.vectors)

    def _fail_batch(self, batch: list[_Item], error: BaseException) -> None:
        for request in {id(i.request): i.request for i in batch}.values():
            self._fail(request, error)
            self._drop(request)

    def _drop(self, request: _Request) -> None:
        """Remove a finished (failed or cancelled) request's texts that are still waiting."""
        with self._work:
            before = self.depth
            kept_urgent = deque(i for i in self._urgent if i.request is not request)
            kept_bulk = deque(i for i in self._bulk if i.request is not request)
            if len(kept_urgent) + len(kept_bulk) == before:
                return
            self._queued_tokens = sum(i.prepared.tokens for q in (kept_urgent, kept_bulk) for i in q)
            self._urgent, self._bulk = kept_urgent, kept_bulk
        self._set_depth()

    @staticmethod
    def _fail(request: _Request, error: BaseException) -> None:
        if not request.future.done():
            request.future.set_exception(error)

    def _set_depth(self) -> None:
        metrics.QUEUE_DEPTH.set(self.depth)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
