"""Episodes the infrastructure failed, on real episodes: agents/rollout.py marks them, and
trainer/objective/infra_failures.py decides their place in their group under each `rollout.infra_failures`.

Real parts: the tool caller (conftest.py: the tiny model replaying one code turn and a boxed answer, greedy) plays
TIR episodes through the transformers engine against a real sandbox server on a loopback port; the episodes whose
client points at a closed port instead fail their tool call after the client's retries. The problems come from a
dataset file, so one group holds a problem the tool caller answers right (reward 1) and one it answers wrong (0):
its advantages are not all zero. The one stand-in: an engine that fails one request, as vLLM does when it aborts
one, which cannot be provoked on demand here.
"""

from __future__ import annotations

import copy
import json
import os
from concurrent.futures import Future

import gymnasium as gym
import pytest
import torch
from engine_settings import HF_FP32

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.engines.base import EngineDied
from agents.engines.hf import HFEngine
from agents.formats.tir_agent import TIRAgent
from agents.rollout import EpisodeSpec, RolloutLimits, infra_failure_reason, run_episodes
from sandbox.deploy.local_server import start_server
from trainer.loop import compute_advantages
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.infra_failures import (
    RESAMPLE_ROUNDS,
    advantage_members,
    resampling,
    settle_infra_failures,
)
from trainer.objective.types import collate
from trainer.setup.build import build_config

LIMITS = RolloutLimits(48, 200, 32, mask_void_turns=False)
DEAD = "http://127.0.0.1:1"  # nothing listens there: every try is refused
RIGHT, WRONG = 0, 1  # dataset rows; the tool caller always answers 4517277
TASKS = [RIGHT, WRONG, RIGHT, RIGHT, RIGHT, WRONG]
GROUPS = [0, 0, 0, 0, 1, 1]
FAILING = (3, 5)  # their client points at DEAD: group 0 loses a 1 to the outage, group 1 its only 0


@pytest.fixture(scope="module")
def sandbox_url():
    uid_base = 30000 + (os.getpid() % 40) * 1500 + 900  # beside tests/trainer/runtime/test_sandbox_outage.py's ranges
    with start_server(workers=2, max_sessions=0, uid_base=uid_base, preload_heavy="") as srv:
        yield srv.url


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> str:
    rows = [("Compute 4821 * 937.", "4517277"), ("Compute 127 * 827.", "105029")]
    path = tmp_path_factory.mktemp("infra") / "math500.jsonl"
    path.write_text("".join(json.dumps({"problem": q, "solution": f"\\boxed{{{a}}}", "answer": a,
                                        "subject": "Algebra", "level": 1, "unique_id": f"test/algebra/{i}.json"})
                            + "\n" for i, (q, a) in enumerate(rows)))
    return str(path)


def make_envs(problems: str, urls: list[str]) -> list[gym.Env]:
    return [gym.make("alprl/TIRMath-v0", dataset=problems, sandbox_url=url, sandbox_retry_s=0.1) for url in urls]


def specs(tasks: list[int], groups: list[int]) -> list[EpisodeSpec]:
    return [EpisodeSpec(seed=i, options={"split": "train", "index": task}, group_id=g)
            for i, (task, g) in enumerate(zip(tasks, groups, strict=True))]


def play(engine, tok, problems: str, urls: list[str], tasks=TASKS, groups=GROUPS, limits=LIMITS, resample=False):
    envs_ = make_envs(problems, urls)

    def run(batch_specs, seed):
        return run_episodes(engine, TIRAgent(tok), envs_, batch_specs, limits, seed=seed, greedy=True)

    try:
        return (resampling(run) if resample else run)(specs(tasks, groups), 11)
    finally:
        for env in envs_:
            env.close()


@pytest.fixture(scope="module")
def played(tool_caller, sandbox_url, problems):
    model, tok = tool_caller
    urls = [DEAD if i in FAILING else sandbox_url for i in range(len(TASKS))]
    return play(HFEngine(model, tok, **HF_FP32), tok, problems, urls)


def advantages(algorithm: str, policy: str, trajs) -> torch.Tensor:
    """The advantage stage of trainer/loop.py `prepare_batch` on these episodes, (B, T)."""
    cfg = build_config(None, [f"algorithm={algorithm}", f"rollout.infra_failures={policy}"])
    members = torch.tensor(advantage_members(trajs, policy))
    return compute_advantages(collate(trajs, 0), cfg, trajs, members)[0]


def test_an_outage_is_marked_and_leaves_the_loss(played):
    assert [t.infra_failure for t in played] == [None, None, None, "sandbox_error", None, "sandbox_error"]
    assert [t.reward for t in played] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]  # the outages' 0 is the mark's
    for i in FAILING:
        t = played[i]
        assert t.info["num_tool_calls"] == 1 and t.info["turns"] == 1  # ended at the failed call
        assert t.info["masked_by"] == "sandbox_error" and not any(t.loss_mask)
    assert all(t.info["num_tool_calls"] == 1 and all(t.loss_mask[s] for s, _ in t.turn_spans)
               for i, t in enumerate(played) if i not in FAILING)


@pytest.mark.parametrize("algorithm", ["grpo", "gigpo"])
def test_excluded_outage_leaves_the_others_advantages_as_without_it(played, algorithm):
    trajs = copy.deepcopy(played)
    settle_infra_failures(trajs, "exclude")
    adv = advantages(algorithm, "exclude", trajs)
    alone = advantages(algorithm, "exclude", copy.deepcopy(played[:3]))  # group 0 as if 3 had never run
    for i in range(3):
        n = len(trajs[i].response_ids)
        assert torch.equal(adv[i, :n], alone[i, :n])
    assert adv[0].abs().sum() > 0 and adv[1].abs().sum() > 0  # rewards 1, 0, 1: a real signal
    assert not adv[3].any()
    fake = advantages(algorithm, "zero", copy.deepcopy(played))
    assert not torch.equal(fake[0], adv[0])  # the fake zero would have moved them


def test_a_group_left_with_one_valid_member_contributes_nothing(played):
    trajs = copy.deepcopy(played)
    metrics = settle_infra_failures(trajs, "exclude")
    lone = trajs[4]
    assert lone.reward == 1.0 and lone.info["masked_by"] == "infra_lone_member" and not any(lone.loss_mask)
    assert not advantages("grpo", "exclude", trajs)[4:].any()
    assert advantages("grpo", "zero", copy.deepcopy(played))[4].sum() > 0  # under zero it beats the fake 0
    assert metrics["rollout/infra_excluded"] == 2.0  # both outages, counted
    assert metrics["rollout/infra_failures/sandbox_error"] == 2.0
    assert metrics["rollout/infra_excluded_groups"] == 1.0


def test_zero_keeps_the_fake_zero_in_its_group(played):
    trajs = copy.deepcopy(played)
    metrics = settle_infra_failures(trajs, "zero")
    assert [t.loss_mask for t in trajs] == [t.loss_mask for t in played]  # no lone member leaves the loss
    assert metrics["rollout/infra_excluded"] == 0.0 and metrics["rollout/infra_failures/sandbox_error"] == 2.0
    batch = collate(trajs, 0)
    before, _ = group_advantages(batch.rewards, batch.group_ids)  # every episode in its group, as before
    assert torch.equal(advantages("grpo", "zero", trajs), broadcast_advantages(before, batch.loss_mask))


def test_resample_replaces_the_failed_episodes(tool_caller, sandbox_url, problems, played):
    model, tok = tool_caller
    engine = HFEngine(model, tok, **HF_FP32)
    urls = [DEAD if i in FAILING else sandbox_url for i in range(len(TASKS))]
    trajs = play(engine, tok, problems, urls, resample=True)  # replays run on the first envs, which answer
    assert [t.infra_failure for t in trajs] == [None] * len(TASKS)
    assert [t.info.get("resampled", 0) for t in trajs] == [0, 0, 0, 1, 0, 1]
    assert [t.task_id for t in trajs] == [t.task_id for t in played]  # the same tasks, in place
    assert [t.reward for t in trajs] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    metrics = settle_infra_failures(trajs, "resample")
    assert metrics["rollout/infra_resampled"] == 2.0 and metrics["rollout/infra_excluded"] == 0.0

    still = play(engine, tok, problems, [DEAD, DEAD], tasks=[RIGHT, WRONG], groups=[0, 0], resample=True)
    assert [t.infra_failure for t in still] == ["sandbox_error"] * 2  # what still fails is excluded
    assert [t.info["resampled"] for t in still] == [RESAMPLE_ROUNDS] * 2
    assert advantage_members(still, "resample") == [False, False]


class FailsOneRequest:
    """The transformers engine, except that request `k` of its first call fails with `error`, as vLLM fails a
    request it aborted (a RuntimeError from that request's future)."""

    def __init__(self, engine: HFEngine, k: int, error: Exception):
        self.engine, self.k, self.error, self.calls = engine, k, error, 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def submit(self, requests, *, greedy=False, seed=None):
        futures = self.engine.submit(requests, greedy=greedy, seed=seed)
        self.calls += 1
        if self.calls == 1:
            futures[self.k] = Future()
            futures[self.k].set_exception(self.error)
        return futures


def test_an_engine_error_ends_one_episode_and_a_dead_engine_the_rollout(tool_caller, sandbox_url, problems):
    model, tok = tool_caller
    aborted = RuntimeError("vLLM request ended with finish_reason='abort' (aborted); check the engine log")
    engine = FailsOneRequest(HFEngine(model, tok, **HF_FP32), 1, aborted)
    trajs = play(engine, tok, problems, [sandbox_url] * 3, tasks=[RIGHT] * 3, groups=[0] * 3)
    assert [t.infra_failure for t in trajs] == [None, "engine_error", None]
    assert "aborted" in trajs[1].info["engine_error"] and trajs[1].info["turns"] == 0
    assert [t.reward for t in trajs] == [1.0, 0.0, 1.0]  # the others played on
    dead = FailsOneRequest(HFEngine(model, tok, **HF_FP32), 1, EngineDied("the engine core was killed"))
    with pytest.raises(EngineDied):
        play(dead, tok, problems, [sandbox_url] * 3, tasks=[RIGHT] * 3, groups=[0] * 3)


def test_a_context_filled_by_the_tool_output_is_not_the_policys(tool_caller, sandbox_url, problems):
    model, tok = tool_caller
    (full,) = play(HFEngine(model, tok, **HF_FP32), tok, problems, [sandbox_url], tasks=[RIGHT], groups=[0])
    turn_end, next_turn = full.turn_spans[0][1], full.turn_spans[1][0]
    prompt = len(full.prompt_ids)
    for context, infra in ((prompt + turn_end + (next_turn - turn_end) // 2, "context_overflow"),  # output cut
                           (prompt + turn_end, None)):  # the policy's own turn filled it: nothing left for output
        small = copy.deepcopy(model)
        small.config.max_position_embeddings = context  # an engine whose context is this long
        (t,) = play(HFEngine(small, tok, **HF_FP32), tok, problems, [sandbox_url], tasks=[RIGHT], groups=[0])
        assert t.info["context_exhausted"] and t.reward == 0.0 and len(t.prompt_ids) + len(t.response_ids) == context
        assert t.infra_failure == infra
        assert any(t.loss_mask) == (infra is None)


def test_timeouts_the_policy_did_not_cause_are_marked_and_its_own_are_not(tool_caller, sandbox_url, problems):
    model, tok = tool_caller
    # the call's deadline passes before any turn
    limits = RolloutLimits(48, 200, 32, episode_timeout_s=1e-9, mask_void_turns=False)
    trajs = play(HFEngine(model, tok, **HF_FP32), tok, problems, [sandbox_url] * 2, tasks=[RIGHT] * 2,
                 groups=[0, 0], limits=limits)
    assert [t.infra_failure for t in trajs] == ["episode_timeout"] * 2
    env = gym.make("alprl/TIRMath-v0", dataset=problems, sandbox_url=sandbox_url, run_timeout_s=0.5)
    try:  # a program the policy wrote that loops past the sandbox's run limit: an observation, its outcome
        env.reset(seed=0, options={"split": "train", "index": RIGHT})
        _, _, terminated, truncated, info = env.step("```python\nwhile True:\n    pass\n```\n")
    finally:
        env.close()
    assert info["tool_statuses"] == ["TimeLimitExceeded"] and not (terminated or truncated)
    assert infra_failure_reason(info) is None
