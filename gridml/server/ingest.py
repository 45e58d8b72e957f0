"""Group commit for epoch reports: many concurrent POSTs, one transaction.

Each uvicorn worker runs one :class:`EpochBatcher`. A request puts its report on a queue and
awaits its own result; a single writer task takes everything queued, stores it with
``SqlStore.record_epochs`` in one transaction (in a thread, so the event loop keeps serving), and
answers every waiter. A report is acknowledged only after its transaction committed, so
an acknowledged report is never lost; idempotency and 409s work as in ``record_epoch``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gridml.store import EpochReport

MAX_BATCH = 256


class EpochBatcher:
    """Batches ``record_epoch`` calls of one process (created lazily inside the event loop)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._queue: asyncio.Queue[tuple[int, EpochReport, asyncio.Future[bool]]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def record(self, trial_id: int, report: EpochReport) -> bool:
        """Store one report; True if new, False if a repeat; raises as record_epoch does."""
        if self._queue is None or self._task is None or self._task.done():
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self._queue.put((trial_id, report, future))
        return await future

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            items = [(trial_id, report) for trial_id, report, _ in batch]
            try:
                results = await loop.run_in_executor(None, self.store.record_epochs, items)
            except Exception as exc:
                results = [exc] * len(batch)
            for (_, _, future), result in zip(batch, results):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
