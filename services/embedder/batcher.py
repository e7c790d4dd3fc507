"""Dynamic micro-batching: concurrent Embed calls from any number of clients share batches.

Texts arrive already tokenized (so their lengths are known) and wait in two queues, queries
before documents, so a bulk write does not stall a search. One loop forms batches with
`batching.pick_batch` and hands them to the provider on a worker thread, so `session.run`
never blocks the event loop and the next requests are received and tokenized while a batch
runs. While the provider is busy, waiting texts pile up and the next batch is naturally bigger;
when it is idle, a partial batch waits at most `max_wait_ms` and only when more texts are
expected (the previous batch was bigger), so a lone caller never pays for batching.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

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
        self._urgent: deque[_Item] = deque()
        self._bulk: deque[_Item] = deque()
        self._queued_tokens = 0
        self._arrived = asyncio.Event()
        self._slots = asyncio.Semaphore(provider.concurrency)
        self._executor = ThreadPoolExecutor(max_workers=provider.concurrency, thread_name_prefix="embed")
        self._expected = 1  # size of the previous batch: how many texts a partial batch waits for
        self._loop_task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def depth(self) -> int:
        return len(self._urgent) + len(self._bulk)

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name="embed-batcher")

    async def close(self) -> None:
        self._closed = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await asyncio.gather(*self._running, return_exceptions=True)
        for item in [*self._urgent, *self._bulk]:
            self._fail(item.request, Unavailable("the embedder is shutting down; retry on another replica"))
        self._urgent.clear()
        self._bulk.clear()
        self._set_depth()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, prepared: list[Prepared], *, urgent: bool = False) -> np.ndarray:
        """Vectors for `prepared`, one row each, in order. Raises ResourceExhausted at once when the
        queue cannot take them, and the batch's error when inference fails."""
        if self._closed:
            raise Unavailable("the embedder is shutting down; retry on another replica")
        if not prepared:
            return np.zeros((0, self.provider.info.dimension), dtype=np.float32)
        if self.depth + len(prepared) > self.max_queue:
            metrics.REJECTED.inc()
            raise ResourceExhausted(
                f"the embedder is busy ({self.depth:,} texts waiting, limit {self.max_queue:,} "
                "HM_EMBED_MAX_QUEUE); retry with backoff or add a replica"
            )
        loop = asyncio.get_running_loop()
        request = _Request(
            future=loop.create_future(),
            vectors=np.empty((len(prepared), self.provider.info.dimension), dtype=np.float32),
            remaining=len(prepared),
        )
        now = time.perf_counter()
        queue = self._urgent if urgent else self._bulk
        queue.extend(_Item(request, row, p, now) for row, p in enumerate(prepared))
        self._queued_tokens += sum(p.tokens for p in prepared)
        self._set_depth()
        self._arrived.set()
        try:
            return await request.future
        except asyncio.CancelledError:
            # The caller gave up (deadline, disconnect): its texts must not cost a batch slot.
            self._drop(request)
            raise

    async def run_exclusive(self, work: Callable[[], T]) -> T:
        """Run `work` on the inference thread between batches (the cross-encoder shares the cores)."""
        async with self._slots:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    # -- the batching loop -------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            while not self.depth:
                self._arrived.clear()
                await self._arrived.wait()
            await self._slots.acquire()
            try:
                await self._gather()
                batch = self._take()
            except BaseException:
                self._slots.release()
                raise
            if not batch:
                self._slots.release()
                continue
            if self.provider.concurrency == 1:
                # Nothing else could start meanwhile: run it here and save a task per batch.
                await self._run(batch)
                continue
            task = asyncio.create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _gather(self) -> None:
        """Let a partial batch fill up, but only while more texts are expected and not past
        max_wait_ms after the oldest one arrived."""
        while self.depth:
            target = min(self._expected, self.max_batch_size)
            if self.depth >= target or self._queued_tokens >= self.max_batch_tokens:
                return
            oldest = min(q[0].enqueued for q in (self._urgent, self._bulk) if q)
            remaining = oldest + self.max_wait_s - time.perf_counter()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return

    def _take(self) -> list[_Item]:
        window = self.max_batch_size * _WINDOW_PER_SLOT
        urgent = [self._urgent[i] for i in range(min(window, len(self._urgent)))]
        bulk = [self._bulk[i] for i in range(min(window, len(self._bulk)))]
        candidates = urgent + bulk
        if not candidates:
            return []
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
        self._set_depth()
        self._expected = len(batch)
        return batch

    async def _run(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        for item in batch:
            metrics.QUEUE_WAIT.observe(started - item.enqueued)
        metrics.BATCH_SIZE.observe(len(batch))
        metrics.BATCH_TOKENS.observe(len(batch) * max(i.prepared.tokens for i in batch))
        try:
            vectors = await loop.run_in_executor(
                self._executor, self.provider.embed, [i.prepared for i in batch]
            )
            if vectors.shape[0] != len(batch):
                raise RuntimeError(f"the provider returned {vectors.shape[0]} vectors for {len(batch)} texts")
        except asyncio.CancelledError:
            # Shutting down mid-batch: its callers get an answer, not a hang.
            for request in {id(i.request): i.request for i in batch}.values():
                self._fail(request, Unavailable("the embedder is shutting down; retry on another replica"))
            raise
        except Exception as exc:
            metrics.BATCH_FAILURES.inc()
            log.error("embedding batch of %d texts failed", len(batch), exc_info=exc)
            error = (
                exc
                if isinstance(exc, HypermnesiaError)
                else BatchFailed("the embedding batch this request was part of failed; see the embedder log")
            )
            for request in {id(i.request): i.request for i in batch}.values():
                self._fail(request, error)
                self._drop(request)
            return
        finally:
            metrics.INFERENCE.observe(time.perf_counter() - started)
            self._slots.release()
        metrics.TEXTS.inc(len(batch))
        for row, item in enumerate(batch):
            request = item.request
            if request.future.done():
                continue
            request.vectors[item.row] = vectors[row]
            request.remaining -= 1
            if request.remaining == 0:
                request.future.set_result(request.vectors)

    # -- helpers -----------------------------------------------------------------------------

    def _drop(self, request: _Request) -> None:
        """Remove a finished (failed or cancelled) request's texts that are still waiting."""
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
