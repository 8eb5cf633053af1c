"""Asynchronous rollouts with bounded staleness (`rollout.async_rollouts`): the rollouts of the next steps run on
a background thread while the trainer updates on the current one.

The schedule is fixed, never timed, so a run and its resume sample every batch with the same weights:

    batch s (1-based step) is sampled with the weights after update v(s) = max(0, s − 1 − a)

where a is how many batches the producer runs ahead (`rollout.max_staleness` under `staleness_policy=wait`,
`rollout.async_prefetch` under `drop`). The trainer uses batch s after s − 1 updates, so its lag is
(s − 1) − v(s) = min(s − 1, a) ≤ a. Under `wait` the lag never exceeds the bound; under `drop` a batch whose lag
exceeds `max_staleness` is dropped (`rollout/async_dropped`) and replaced by a rollout sampled synchronously with
the current weights (lag 0). This is the same schedule as `rollout.policy_lag` = a (trainer/runtime/sampler_mismatch.py),
which produces it without overlap.

Ordering (one engine, one producer thread; the engine is never used by two threads at once, and a weight push
happens between rollouts, never during one):

    1. every batch in flight was sampled, or is being sampled, with the weights the engine holds now (version);
    2. after update k the trainer waits for them all (they must use θ_{k−1}), then pushes θ_k, then submits the
       batch that uses θ_k (s = k + a + 1): 1 holds again;
    3. anything else that uses the engine (held-out evaluation, a drop's replacement rollout) runs after `drain`
       or on the producer thread itself.

Every batch records the weight version it was sampled with; its lag at use is the trainer's version (completed
updates) minus that version, set on each trajectory as `info["policy_lag"]` and logged as `rollout/policy_lag_mean`
and `_max`; `perf/rollout_wait_s` is the time the trainer blocked for rollouts in the step (about 0 when the
rollout hides behind the update), `perf/rollout_s` the producer's own time on the batch.

Resume: a checkpoint after update k holds θ_k only, but batches k+1..k+a were sampled with older weights. They are
done by then (step 2 waited for them), so `state_dict` stores them (plain dicts) with their versions, and a resumed
run puts them back before it submits batch k + a + 1 with the checkpoint's weights. The producer samples up to
a batches past `steps` so that the last checkpoint holds them too (a longer resumed run continues exactly); that is
a extra rollouts at the end of a run. All sampling randomness derives from (seed, step) in `collect_step` (no
global RNG), so the background thread draws what the main thread would.

Not supported (trainer/setup/rules.py refuses it): data parallelism, `rollout.policy_lag`, MIPU's screening, vLLM's
sleep mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from agents.trajectory import Trajectory
from trainer.config.train_config import TrainConfig

# trainer/components.py builds a run from the runtime room, so its type is named here, not imported (an upward import)
Components = Any  # trainer.components.Components

STALENESS_POLICIES = ("wait", "drop")

Collect = Callable[[int], tuple[list[Trajectory], dict[str, float]]]
"""collect_step bound to the run: step → (this step's trajectories, their sampling metrics)."""


@dataclass
class Rolled:
    """One batch the producer sampled: its trajectories, sampling metrics, the producer's seconds on it."""

    trajs: list[Trajectory]
    sampling: dict[str, float]
    seconds: float


@dataclass
class Pending:
    """A batch submitted to the producer (or restored from a checkpoint) and the weight version it samples with."""

    future: Future
    version: int


def prefetch(cfg: TrainConfig) -> int:
    """a: how many batches the producer runs ahead of the trainer."""
    r = cfg.rollout
    return r.max_staleness if r.staleness_policy == "wait" else (r.async_prefetch or r.max_staleness)


class AsyncRollouts:
    """The producer of one run: `get(step)` before the update, `after_update(step)` instead of the weight sync,
    `metrics(trajs)` for the step's record, `drain()` before anything else uses the engine, `state_dict()` at a
    checkpoint, `close()` at the end."""

    def __init__(self, c: Components, cfg: TrainConfig, collect: Collect, start: int, saved: dict | None = None):
        self.c, self.collect, self.steps = c, collect, cfg.steps
        self.ahead, self.bound = prefetch(cfg), cfg.rollout.max_staleness
        self.drop = cfg.rollout.staleness_policy == "drop"
        self.version = start  # completed updates: the weights the engine holds (the checkpoint's on resume)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="async-rollout")
        self.pending: dict[int, Pending] = restore(saved or {})
        self.last: dict[str, float] = {}
        self.sync_wait = 0.0
        self.synced: dict[str, float] = {}  # the last sync's check (`Components.sync_engine`)
        for step in range(start + 1, start + self.ahead + 2):
            if step not in self.pending and start < self.steps:  # a fresh run: all on θ_0; a resume: batch start + a + 1 on θ_start
                self._submit(step)

    def _submit(self, step: int) -> None:
        self.pending[step] = Pending(self.pool.submit(self._roll, step), self.version)

    def _roll(self, step: int) -> Rolled:
        start = time.perf_counter()
        trajs, sampling = self.collect(step)
        return Rolled(trajs, sampling, time.perf_counter() - start)

    def get(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Step `step`'s trajectories (blocking until sampled) and their sampling metrics, lag set on each."""
        start = time.perf_counter()
        pending = self.pending.pop(step)
        rolled, version, dropped = pending.future.result(), pending.version, 0
        if self.drop and self.version - version > self.bound:  # over the bound: resample with current weights
            rolled, version, dropped = self.pool.submit(self._roll, step).result(), self.version, 1
        lag = self.version - version
        for t in rolled.trajs:
            t.info["policy_lag"] = lag
        self.last = {"rollout/policy_lag_mean": float(lag), "rollout/policy_lag_max": float(lag),
                     "rollout/async_dropped": float(dropped), "perf/rollout_s": rolled.seconds,
                     "perf/rollout_wait_s": time.perf_counter() - start}
        return rolled.trajs, rolled.sampling

    def after_update(self, step: int) -> None:
        """The weight sync of update `step`: wait for the rollouts on the older weights, push, submit the next."""
        start = time.perf_counter()
        self.drain()
        self.sync_wait = time.perf_counter() - start
        self.synced = self.c.sync_engine()  # rollout/weight_sync_ok when the engine checks the push
        self.version += 1
        if step < self.steps:  # the batch that uses θ_step; past `steps` only those a checkpoint must hold
            self._submit(step + self.ahead + 1)

    def metrics(self, trajs: list[Trajectory]) -> dict[str, float]:
        """The step's lag, drops, waits and the producer's rollout time (replacing the synchronous timing's)."""
        tokens = sum(t.episode_sampled_tokens for t in trajs)
        m = dict(self.last)
        m["perf/rollout_wait_s"] += self.sync_wait
        m |= self.synced
        m["perf/rollout_tokens_per_s"] = tokens / max(m["perf/rollout_s"], 1e-9)
        return m

    def drain(self) -> None:
        """Block until the producer is idle (its exceptions surface here)."""
        for pending in self.pending.values():
            pending.future.result()

    def state_dict(self) -> dict[str, Any]:
        """The batches sampled with weights older than the trainer's (done by now: `after_update` drained), which
        the checkpoint's weights cannot reproduce."""
        return {"batches": {step: {"version": p.version, "seconds": r.seconds, "sampling": r.sampling,
                                   "trajs": [asdict(t) for t in r.trajs]}
                            for step, p in sorted(self.pending.items()) if p.version < self.version
                            for r in [p.future.result()]}}

    def close(self) -> None:
        """Cancel what has not started; wait for the rollout running now (bounded by one rollout, and by
        rollout.episode_timeout_s when set), so the engine is closed after its last use."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def restore(saved: dict) -> dict[int, Pending]:
    """`state_dict()`'s batches as finished futures."""
    out = {}
    for step, b in (saved.get("batches") or {}).items():
        future: Future = Future()
        future.set_result(Rolled([Trajectory.from_dict(t) for t in b["trajs"]], b["sampling"], b["seconds"]))
        out[int(step)] = Pending(future, b["version"])
    return out


def start_async(c: Components, cfg: TrainConfig, collect: Collect, start: int,
                extra: dict) -> AsyncRollouts | None:
    """The run's producer when rollout.async_rollouts is on (restoring a checkpoint's batches from its extra
    state), else None."""
    if not cfg.rollout.async_rollouts:
        return None
    return AsyncRollouts(c, cfg, collect, start, extra.get("async_rollouts"))
