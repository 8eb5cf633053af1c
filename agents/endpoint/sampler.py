"""The endpoint's requests → the rollout engine, one request per call, each with its own seed.

An engine that takes concurrent callers (vLLM: requests of calls made while others run join its running batch)
gets each request straight away. The transformers engine runs each `submit` as one batched generation in the
caller's thread, so one dispatcher thread gathers the requests that arrive and submits them together: it flushes
when every live episode has a request waiting (the turn-by-turn schedule of agents/rollout.py, whose batches a
harness replaying the native loop reproduces) or when the oldest request has waited `max_wait_s`. Per-request seeds
make a request's tokens independent of the batch it joins, on both engines (agents/engines/hf.py, vllm.py), up to
the numerics of batches of other shapes (exact in fp32 in tests/agents/test_policy_endpoint.py; a bf16 sampler can
flip a near-tie).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from agents.engines.base import Engine, GenerationRequest, GenerationResult


def _chain(source: Future, target: Future) -> None:
    def copy(done: Future) -> None:
        err = done.exception()
        if err is not None:
            target.set_exception(err)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class Sampler:
    """`submit(request, seed)` → a future of the engine's result (module docstring). `live()`: how many episodes
    may still send a request (None: unknown, flush on `max_wait_s` alone)."""

    def __init__(self, engine: Engine, live: Callable[[], int] | None = None, max_wait_s: float = 0.05):
        self.engine, self.live, self.max_wait_s = engine, live, max_wait_s
        self._pending: list[tuple[GenerationRequest, int, Future, float]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = None
        if not engine.concurrent_callers:
            self._thread = threading.Thread(target=self._dispatch, name="alprl-endpoint-sampler", daemon=True)
            self._thread.start()

    @property
    def version(self) -> int:
        """The policy version of the weights the engine holds (`Engine.weight_version`; 0 for an engine without)."""
        return getattr(self.engine, "weight_version", 0)

    def submit(self, request: GenerationRequest, seed: int) -> Future[GenerationResult]:
        if self._thread is None:
            return self.engine.submit([request], seed=[seed])[0]
        future: Future[GenerationResult] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the endpoint's sampler is closed")
            self._pending.append((request, seed, future, time.monotonic()))
            self._cond.notify_all()
        return future

    def wake(self) -> None:
        """Re-check the flush rule (an episode ended, so fewer requests are to be waited for)."""
        with self._cond:
            self._cond.notify_all()

    def _ready(self) -> bool:
        live = self.live() if self.live is not None else None
        full = live is not None and len(self._pending) >= live
        return full or time.monotonic() >= self._pending[0][3] + self.max_wait_s

    def _next_batch(self) -> list[tuple[GenerationRequest, int, Future, float]]:
        with self._cond:
            while not self._closed and (not self._pending or not self._ready()):
                timeout = None if not self._pending else max(self._pending[0][3] + self.max_wait_s
                                                             - time.monotonic(), 0.001)
                self._cond.wait(timeout)
            batch, self._pending = self._pending, []
            return batch

    def _dispatch(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            try:
                results = self.engine.submit([r for r, _, _, _ in batch], seed=[s for _, s, _, _ in batch])
            except BaseException as err:  # a failed submit fails its requests, not the dispatcher
                for _, _, future, _ in batch:
                    future.set_exception(err)
                continue
            for (_, _, future, _), result in zip(batch, results, strict=True):
                _chain(result, future)

    def close(self) -> None:
        """Stop the dispatcher; requests still waiting fail."""
        with self._cond:
            self._closed = True
            waiting, self._pending = self._pending, []
            self._cond.notify_all()
        for _, _, future, _ in waiting:
            future.set_exception(RuntimeError("the endpoint closed before this request was sampled"))
        if self._thread is not None:
            self._thread.join(timeout=60)
