"""Backpressure for the HTTP layer: at most `capacity` executions at once, at most `max_queue` waiting.

A request that would make the queue longer than `max_queue`, or that waits longer than `wait_timeout_s`, gets
`Overloaded` — the routes turn it into 429 + Retry-After (or the configured 504), never a 5xx of our own making.
"""

from __future__ import annotations

import asyncio


class Overloaded(Exception):
    """No execution slot now; retry after `retry_after_s` seconds."""

    def __init__(self, reason: str, retry_after_s: int):
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Gate:
    def __init__(self, capacity: int, max_queue: int, wait_timeout_s: float, retry_after_s: int = 1):
        self.capacity = capacity
        self.max_queue = max_queue
        self.wait_timeout_s = wait_timeout_s
        self.retry_after_s = retry_after_s
        self._sem = asyncio.Semaphore(capacity)
        self.waiting = 0
        self.in_flight = 0
        self.rejected = 0

    async def __aenter__(self) -> Gate:
        if self._sem.locked() or self.waiting:
            if self.waiting >= self.max_queue:
                self.rejected += 1
                raise Overloaded(f"queue full ({self.max_queue} waiting)", self.retry_after_s)
            self.waiting += 1
            try:
                await asyncio.wait_for(self._sem.acquire(), self.wait_timeout_s)
            except TimeoutError:
                self.rejected += 1
                raise Overloaded(f"no worker free within {self.wait_timeout_s:g} s", self.retry_after_s) from None
            finally:
                self.waiting -= 1
        else:
            await self._sem.acquire()
        self.in_flight += 1
        return self

    async def __aexit__(self, *exc) -> None:
        self.in_flight -= 1
        self._sem.release()
