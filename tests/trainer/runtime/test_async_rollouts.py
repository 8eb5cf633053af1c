"""Asynchronous rollouts (trainer/runtime/async_rollouts.py) on the tiny model: the lag of every sample stays within
rollout.max_staleness and follows the fixed schedule min(s − 1, a); the run equals a synchronous one with
rollout.policy_lag = a (both sample batch s with the weights after update s − 1 − a); --resume repeats the next
step bit for bit; the drop policy replaces over-stale batches; the config rules."""

from __future__ import annotations

import time

import pytest
import torch
from tiny_tir import SMALL

import trainer.loop as loop
from agents.models import load_model_and_tokenizer
from agents.trajectory import Trajectory
from trainer.config.errors import ConfigError
from trainer.runtime.async_rollouts import AsyncRollouts
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke

STEPS = 3
COMPARED = ("loss/first_minibatch", "loss/policy", "actor/grad_norm", "rollout/reward", "rollout_corr/kl")


def _cfg(out, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={out}", f"steps={STEPS}",
                                       "save_every=1", "algo.entropy_coef=0.01", *extra])


def _weights(run_dir, step):
    model, _ = load_model_and_tokenizer(run_dir / "checkpoints" / f"step_{step}")
    return {k: v.clone() for k, v in model.named_parameters()}


def _run(cfg, monkeypatch, resume=False):
    """Train, recording each step's per-sample lags (what the loop hands to `learn`)."""
    lags, learn = [], loop.learn

    def recording(c, cfg_, algos, trajs, step, **kw):
        lags.append((step, [t.info.get("policy_lag") for t in trajs]))
        return learn(c, cfg_, algos, trajs, step, **kw)

    monkeypatch.setattr(loop, "learn", recording)
    results = loop.train(cfg, resume=resume, show_progress=False)
    monkeypatch.setattr(loop, "learn", learn)
    return results, lags


@pytest.fixture(scope="module")
def runs(sft_dir, tmp_path_factory):
    """Async (max_staleness 1 and 2), synchronous with policy_lag=1, and async 2 steps + --resume to 3."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("async")
    out = {}
    for name, extra in [("a1", ["rollout.async_rollouts=true", "rollout.max_staleness=1"]),
                        ("a2", ["rollout.async_rollouts=true", "rollout.max_staleness=2"]),
                        ("lag1", ["rollout.policy_lag=1"])]:
        out[name] = (*_run(_cfg(root / name, sft_dir, *extra), mp), root / name)
    part = ["rollout.async_rollouts=true", "rollout.max_staleness=1"]
    _run(_cfg(root / "part", sft_dir, *part, "steps=2"), mp)
    out["resumed"] = (*_run(_cfg(root / "part", sft_dir, *part), mp, resume=True), root / "part")
    mp.undo()
    return out


@pytest.mark.parametrize("name,a", [("a1", 1), ("a2", 2)])
def test_every_sample_lag_follows_the_schedule_within_the_bound(runs, name, a):
    results, lags, _ = runs[name]
    for r in results:
        expected = min(r.step - 1, a)  # batch s sampled with θ after update max(0, s − 1 − a)
        assert r.metrics["rollout/policy_lag_max"] == expected <= a
        assert r.metrics["rollout/policy_lag_mean"] == expected
        assert r.metrics["rollout/async_dropped"] == 0
        assert r.metrics["perf/rollout_wait_s"] >= 0
    for step, sample_lags in lags:
        assert sample_lags and all(lag == min(step - 1, a) <= a for lag in sample_lags)


def test_async_equals_a_synchronous_policy_lag_of_the_same_size(runs):
    """rollout.policy_lag=1 pushes θ_{s−2} before batch s; the async producer samples batch s with θ_{s−2}: the
    same batches, the same updates, the same weights (the threads change when, not what)."""
    (a, _, a_dir), (b, _, b_dir) = runs["a1"], runs["lag1"]
    for ra, rb in zip(a, b, strict=True):
        assert {k: ra.metrics[k] for k in COMPARED} == {k: rb.metrics[k] for k in COMPARED}
    wa, wb = _weights(a_dir, STEPS), _weights(b_dir, STEPS)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    other = runs["a2"][0][-1].metrics  # not vacuous: step 3 on θ_0 instead of θ_1 is another step
    assert other["loss/first_minibatch"] != a[-1].metrics["loss/first_minibatch"]


def test_resume_reproduces_the_next_step_bit_for_bit(runs):
    (straight, _, straight_dir), (resumed, lags, resumed_dir) = runs["a1"], runs["resumed"]
    assert [r.step for r in resumed] == [STEPS]
    assert lags == [(STEPS, [1] * len(lags[0][1]))]  # batch 3 came from the checkpoint, sampled with θ_1
    a, b = straight[-1].metrics, resumed[0].metrics
    assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}
    wa, wb = _weights(straight_dir, STEPS), _weights(resumed_dir, STEPS)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_drop_replaces_batches_over_the_bound_with_current_ones(tmp_path, sft_dir, monkeypatch):
    cfg = _cfg(tmp_path, sft_dir, "rollout.async_rollouts=true", "rollout.max_staleness=1",
               "rollout.staleness_policy=drop", "rollout.async_prefetch=2")
    results, lags = _run(cfg, monkeypatch)
    # prefetched 2 ahead: lag min(s − 1, 2) → step 3's (lag 2 > 1) is dropped and resampled on θ_2 (lag 0)
    assert [r.metrics["rollout/async_dropped"] for r in results] == [0, 0, 1]
    assert [r.metrics["rollout/policy_lag_max"] for r in results] == [0, 1, 0]
    assert [sorted(set(x)) for _, x in lags] == [[0], [1], [0]]


@pytest.mark.parametrize("extra,message", [
    (["rollout.policy_lag=1"], "both produce policy lag"),
    (["algo.mipu_screen=true"], "MIPU screens the candidate"),
    (["rollout.enable_sleep_mode=true"], "enable_sleep_mode=false"),
    (["distributed.world_size=2"], "data-parallel asynchronous rollouts are not supported"),
    (["rollout.max_staleness=0"], "rollout.max_staleness=0 is out of range"),
    (["rollout.async_prefetch=-1"], "rollout.async_prefetch=-1 is out of range"),
    (["rollout.staleness_policy=sometimes"], "rollout.staleness_policy"),
])
def test_config_rules(extra, message):
    with pytest.raises(ConfigError, match=message):
        build_config(None, ["rollout.async_rollouts=true", *extra])


def test_world_size_from_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="with 2 processes"):
        build_config(None, ["rollout.async_rollouts=true"])
    build_config(None, ["rollout.async_rollouts=false"])  # the synchronous loop runs under torchrun


class _FakeRun:
    """An engine's version counter and an event log: no model, just the producer's ordering."""

    def __init__(self):
        self.version, self.busy, self.events = 0, False, []

    def sync_engine(self):
        assert not self.busy, "a weight push during a rollout"
        self.version += 1

    def collect(self, step):
        self.busy = True
        self.events.append((step, self.version))
        time.sleep(0.01)
        self.busy = False
        if step == self.fail_at:
            raise RuntimeError(f"rollout {step} failed")
        return [Trajectory(prompt_ids=[1])], {}

    fail_at = -1


def _fake_cfg(a, steps, policy="wait", prefetch=0):
    return build_config(None, [f"steps={steps}", f"rollout.max_staleness={a}", f"rollout.staleness_policy={policy}",
                               f"rollout.async_prefetch={prefetch}"])


@pytest.mark.parametrize("a", [1, 2, 3])
def test_the_producer_samples_batch_s_with_the_weights_after_update_s_minus_1_minus_a(a):
    run, steps = _FakeRun(), 6
    rollouts = AsyncRollouts(run, _fake_cfg(a, steps), run.collect, start=0)
    try:
        for step in range(1, steps + 1):
            (traj,), _ = rollouts.get(step)
            assert traj.info["policy_lag"] == min(step - 1, a)
            rollouts.after_update(step)
        rollouts.drain()
    finally:
        rollouts.close()
    # every batch once, in order, with θ after update max(0, s − 1 − a); a batches past the end for the checkpoint
    assert run.events == [(s, max(0, s - 1 - a)) for s in range(1, steps + a + 1)]
    assert sorted(rollouts.state_dict()["batches"]) == list(range(steps + 1, steps + a + 1))


def test_a_failed_rollout_surfaces_in_the_trainer_and_close_is_bounded():
    run = _FakeRun()
    run.fail_at = 2
    rollouts = AsyncRollouts(run, _fake_cfg(1, 5), run.collect, start=0)
    rollouts.get(1)
    with pytest.raises(RuntimeError, match="rollout 2 failed"):
        rollouts.get(2)
    start = time.perf_counter()
    rollouts.close()
    assert time.perf_counter() - start < 5


def test_drop_resamples_on_the_producer_thread_with_the_current_weights():
    run, steps = _FakeRun(), 5
    rollouts = AsyncRollouts(run, _fake_cfg(1, steps, "drop", prefetch=2), run.collect, start=0)
    try:
        dropped = []
        for step in range(1, steps + 1):
            (traj,), _ = rollouts.get(step)
            dropped.append(rollouts.last["rollout/async_dropped"])
            assert traj.info["policy_lag"] == (min(step - 1, 2) if step < 3 else 0)
            rollouts.after_update(step)
    finally:
        rollouts.close()
    assert dropped == [0, 0, 1, 1, 1]  # lag min(s − 1, 2) > 1 from step 3 on
    assert [(s, v) for s, v in run.events if s >= 3 and v == s - 1] == [(3, 2), (4, 3), (5, 4)]  # the replacements


def test_held_out_evaluation_waits_for_the_producer(tmp_path, sft_dir, monkeypatch):
    cfg = _cfg(tmp_path, sft_dir, "rollout.async_rollouts=true", "steps=2", "eval_tasks=2", "eval_every=1")
    results, _ = _run(cfg, monkeypatch)
    assert all("eval/success" in r.metrics for r in results)
