"""Episodes the infrastructure failed, by hand (trainer/objective/infra_failures.py): who counts in a group's
advantage statistics under each `rollout.infra_failures` policy, and the arithmetic of every estimator when one
member is out. The same policies on real episodes against a real sandbox server:
tests/agents/test_rollout_infra_failures.py.
"""

from __future__ import annotations

import pytest
import torch

from agents.trajectory import Trajectory
from trainer.algorithms.dapo import informative
from trainer.algorithms.quatro import quatro_targets
from trainer.objective.advantages import group_advantages
from trainer.objective.gigpo import gigpo_advantages
from trainer.objective.infra_failures import (
    RESAMPLE_ROUNDS,
    advantage_members,
    resampling,
    settle_infra_failures,
)
from trainer.objective.types import collate
from trainer.setup.build import build_config


def episode(reward: float, group: int, failed: str | None = None, n: int = 3) -> Trajectory:
    t = Trajectory(prompt_ids=[1], response_ids=[5] * n, loss_mask=[1] * n, rollout_logprobs=[-0.5] * n,
                   reward=0.0 if failed else reward, group_id=group)  # the rollout ends a failure with reward 0
    if failed:
        t.mark_infra_failure(failed)
    return t


def test_an_excluded_member_leaves_every_statistic_of_its_group():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    members = torch.tensor([True, True, True, False, True, False])  # rows 3 and 5: outages (reward 0 by the mark)
    adv, _ = group_advantages(rewards, groups, members=members)
    # group 0 over [1, 0, 1]: mean 2/3, unbiased std sqrt(((1/3)² + (2/3)² + (1/3)²) / 2) = sqrt(1/3) = 0.57735
    # → (1/3) / 0.57735 = 0.57735 and (−2/3) / 0.57735 = −1.15470; the outage gets 0
    assert torch.allclose(adv[:4], torch.tensor([0.57735, -1.15470, 0.57735, 0.0]), atol=1e-5)
    assert torch.equal(adv[4:], torch.zeros(2))  # group 1 keeps one member: no baseline, nothing
    # with the fake zero in (the zero policy): mean 1/2, std sqrt(1/3) → ±0.86603, the outage −0.86603
    zero, _ = group_advantages(rewards, groups)
    assert torch.allclose(zero[:4], torch.tensor([0.86603, -0.86603, 0.86603, -0.86603]), atol=1e-5)
    # RLOO, no std: 1 − mean(0, 1) = 0.5 and 0 − mean(1, 1) = −1 over the three members
    rloo, _ = group_advantages(rewards, groups, members=members, norm_by_std=False, leave_one_out=True)
    assert torch.allclose(rloo[:4], torch.tensor([0.5, -1.0, 0.5, 0.0]))
    # exactly what the group gives without the outage's row
    alone, _ = group_advantages(rewards[:3], groups[:3])
    assert torch.equal(adv[:3], alone)


def test_who_counts_under_each_policy():
    trajs = [episode(1.0, 0), episode(0.0, 0), episode(0.0, 0, "sandbox_error"),
             episode(1.0, 1), episode(0.0, 1, "engine_error")]
    assert advantage_members(trajs, "zero") == [True] * 5
    assert advantage_members(trajs, "exclude") == [True, True, False, False, False]
    assert advantage_members(trajs, "resample") == advantage_members(trajs, "exclude")  # what resampling left
    with pytest.raises(ValueError, match="exclude, resample, zero"):
        advantage_members(trajs, "drop")


def test_settling_masks_a_lone_member_and_counts_per_step():
    trajs = [episode(1.0, 0), episode(0.0, 0), episode(0.0, 0, "sandbox_error"),
             episode(1.0, 1), episode(0.0, 1, "context_overflow")]
    metrics = settle_infra_failures(trajs, "exclude")
    assert trajs[3].loss_mask == [0, 0, 0] and trajs[3].info["masked_by"] == "infra_lone_member"
    assert [sum(t.loss_mask) for t in trajs[:2]] == [3, 3]  # a group with a baseline keeps its tokens
    assert metrics["rollout/infra_excluded"] == 2.0 and metrics["rollout/infra_excluded_groups"] == 1.0
    assert metrics["rollout/infra_failures/sandbox_error"] == 1.0
    assert metrics["rollout/infra_failures/context_overflow"] == 1.0
    assert metrics["rollout/infra_failures/engine_error"] == metrics["rollout/infra_resampled"] == 0.0

    kept = [episode(1.0, 1), episode(0.0, 1, "episode_timeout")]
    zero = settle_infra_failures(kept, "zero")  # the failure keeps its place: the 1 has a baseline
    assert sum(kept[0].loss_mask) == 3 and zero["rollout/infra_excluded"] == 0.0
    assert zero["rollout/infra_failures/episode_timeout"] == 1.0


def test_a_step_the_engine_failed_entirely_raises():
    trajs = [episode(0.0, 0, "engine_error"), episode(0.0, 0, "engine_error")]
    for t in trajs:
        t.info["engine_error"] = "RuntimeError: CUDA error"
    with pytest.raises(RuntimeError, match="every request.*CUDA error"):
        settle_infra_failures(trajs, "exclude")


def test_gigpo_step_groups_leave_the_outage_out():
    # episodes A (1, two turns), B (0, two turns), C (an outage after one turn); all start at state s0
    rewards, groups = torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long)
    keys = [["s0", "s1"], ["s0", "s2"], ["s0"]]
    kw = {"gamma": 0.5, "step_weight": 1.0, "step_norm": "mean_norm"}
    adv, _ = gigpo_advantages(rewards, groups, keys, members=torch.tensor([True, True, False]), **kw)
    # A^E over [1, 0]: ±1/sqrt(0.5) / 2 = ±0.70711. A^S at s0 over returns [0.5·1, 0.5·0] = [0.5, 0]: ±0.25;
    # s1, s2 are step groups of one: 0. C is in neither level.
    expected = [[0.70711 + 0.25, 0.70711], [-0.70711 - 0.25, -0.70711], [0.0]]
    for row, want in zip(adv, expected, strict=True):
        assert row == pytest.approx(want, abs=1e-5)
    alone, _ = gigpo_advantages(rewards[:2], groups[:2], keys[:2], **kw)
    assert adv[:2] == alone  # exactly the batch without C


def test_quatro_duals_leave_the_outage_out():
    algo = build_config(None, ["algorithm=quatro"]).algo
    trajs = [episode(1.0, 0), episode(0.0, 0), episode(0.0, 0), episode(0.0, 0, "sandbox_error")]
    batch = collate(trajs, pad_id=0)
    members = torch.tensor(advantage_members(trajs, "exclude"))
    targets, _ = quatro_targets(algo, batch, members)
    alone, _ = quatro_targets(algo, collate(trajs[:3], pad_id=0))
    assert torch.equal(targets[:3], alone) and targets[:3].abs().sum() > 0  # the dual of [1, 0, 0] alone
    assert torch.equal(targets[3], torch.zeros(3))
    fake, _ = quatro_targets(algo, batch)  # with the fake zero the group is [1, 0, 0, 0]: another dual
    assert not torch.allclose(fake[:3], alone)


def test_dapo_asks_the_members_whether_a_group_is_informative():
    ones_and_an_outage = [episode(1.0, 0), episode(1.0, 0), episode(0.0, 0, "sandbox_error")]
    assert informative(ones_and_an_outage, "zero")  # the fake 0 makes it look informative
    assert not informative(ones_and_an_outage, "exclude")
    lone = [episode(1.0, 0), episode(0.0, 0, "sandbox_error"), episode(0.0, 0, "sandbox_error")]
    assert not informative(lone, "exclude")
    assert informative([episode(1.0, 0), episode(0.0, 0), episode(0.0, 0, "sandbox_error")], "exclude")


def test_resampling_replaces_in_place_and_gives_up_after_its_rounds():
    calls = []

    def run(specs, seed):  # the task's episodes fail while `down` says so, the others succeed
        calls.append((list(specs), seed))
        return [episode(float(s), 0, "sandbox_error" if len(calls) <= down else None) for s in specs]

    down = 2  # the first try and the first resample fail, the second resample succeeds
    trajs = resampling(run)([1, 0, 1], 7)
    assert [t.infra_failure for t in trajs] == [None] * 3 and [t.reward for t in trajs] == [1.0, 0.0, 1.0]
    assert [t.info["resampled"] for t in trajs] == [2, 2, 2] and len(calls) == 3
    assert len({seed for _, seed in calls}) == 3  # each round samples afresh

    calls.clear()
    down = 100
    trajs = resampling(run)([1, 0], 7)
    assert len(calls) == 1 + RESAMPLE_ROUNDS  # bounded: what still fails stays marked, to be excluded
    assert all(t.infra_failure == "sandbox_error" for t in trajs)
