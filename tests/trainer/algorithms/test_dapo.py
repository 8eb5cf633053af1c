"""DAPO's rollout-side changes: dynamic sampling with refill, overlong filtering, soft overlong punishment."""

from __future__ import annotations

import pytest

from agents.trajectory import Trajectory
from trainer.algorithms.dapo import collect_dynamic, overlong_shaping
from trainer.setup.build import build_config
from trainer.tasks import group_specs


def _cfg(*overrides):
    return build_config(None, ["algorithm=dapo", "rollout.prompts_per_step=4", "rollout.group_size=2",
                               "rollout.max_response_tokens=100", *overrides])


def fake_run(flat: set[int]):
    """Episodes whose rewards differ within a group unless the task index is in `flat`; records each call."""
    calls = []

    def run(specs, seed):
        calls.append(([s.options["index"] for s in specs[::2]], seed))
        return [Trajectory(prompt_ids=[1], reward=0.0 if s.options["index"] in flat else float(i % 2),
                           group_id=s.group_id, task_id=str(s.options["index"])) for i, s in enumerate(specs)]
    return run, calls


def test_zero_variance_groups_are_dropped_and_refilled_with_new_prompts():
    cfg = _cfg()
    first = group_specs([10, 11, 12, 13], "train", 2)
    run, calls = fake_run(flat={10, 12})
    trajs, metrics = collect_dynamic(cfg, step=5, first=first, run=run, seed=7)
    assert len(calls) == 2 and len(calls[1][0]) == 2  # one refill round for the two dropped groups
    refill = calls[1][0]
    assert not set(refill) & {10, 11, 12, 13} and calls[1][1] != 7  # new prompts, another sampling seed
    assert [t.task_id for t in trajs[::2]] == ["11", "13", *map(str, refill)]
    assert [t.group_id for t in trajs] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert metrics == {"dapo/rounds": 2.0, "dapo/groups_dropped": 2.0, "dapo/groups_kept": 4.0}
    again, _ = collect_dynamic(cfg, step=5, first=first, run=fake_run(flat={10, 12})[0], seed=7)
    assert [t.task_id for t in again] == [t.task_id for t in trajs]  # (seed, step) decide the refill


def test_when_the_rounds_run_out_flat_groups_fill_the_batch():
    cfg = _cfg("algo.dynamic_max_rounds=2")
    everything = set(range(100_000))
    run, calls = fake_run(flat=everything)
    trajs, metrics = collect_dynamic(cfg, step=1, first=group_specs([1, 2, 3, 4], "train", 2), run=run, seed=0)
    assert len(calls) == 2 and len(trajs) == 8 and metrics["dapo/groups_kept"] == 0.0
    assert sorted({t.group_id for t in trajs}) == [0, 1, 2, 3]


def test_soft_overlong_punishment_ramps_over_the_buffer_and_the_filter_masks():
    cfg = _cfg("algo.overlong_buffer=20", "algo.overlong_penalty=0.5")
    trajs = [Trajectory(prompt_ids=[1], response_ids=[5] * n, loss_mask=[1] * n, rollout_logprobs=[-0.7] * n,
                        reward=1.0) for n in (70, 90, 100)]
    trajs[2].info["budget_exhausted"] = True
    metrics = overlong_shaping(cfg, trajs)
    assert [t.reward for t in trajs] == pytest.approx([1.0, 0.75, 0.5])  # 0, −0.5·(10/20), −0.5 at the budget
    assert [sum(t.loss_mask) for t in trajs] == [70, 90, 0]  # the overlong one leaves the loss
    # the episode-mask invariant: a masked row has zero rollout log-probs and says so, as the rollout's masks do
    assert trajs[2].rollout_logprobs == [0.0] * 100 and trajs[2].info["loss_masked"]
    assert trajs[2].info["masked_by"] == "overlong" and "loss_masked" not in trajs[1].info
    assert metrics["dapo/overlong_filtered"] == pytest.approx(1 / 3)
    assert metrics["dapo/overlong_penalty"] == pytest.approx(-0.25)


def test_bad_dapo_settings_are_refused():
    from trainer.config.errors import ConfigError

    with pytest.raises(ConfigError, match="group_size"):
        build_config(None, ["algorithm=dapo", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="overlong_buffer"):
        build_config(None, ["algo.overlong_buffer=5000", "rollout.max_response_tokens=4000"])


def test_each_data_parallel_rank_fills_its_own_share_with_prompts_no_other_rank_draws():
    cfg = _cfg()
    every = group_specs([10, 11, 12, 13], "train", 2)  # the step's 4 prompts; rank r holds 2 of them
    filled, refills = {}, {}
    for rank in (0, 1):
        flat = {10, 11, 12, 13}  # every first-round group is uninformative: both ranks refill
        run, calls = fake_run(flat)
        trajs, metrics = collect_dynamic(cfg, 3, every[rank * 4: (rank + 1) * 4], run, seed=5, rank=rank, world=2,
                                         step_indices={10, 11, 12, 13})
        filled[rank] = len(trajs)
        refills[rank] = {i for indices, _ in calls[1:] for i in indices}
    assert filled == {0: 4, 1: 4}  # prompts_per_step / world groups of group_size each
    assert refills[0] and refills[1] and not refills[0] & refills[1]  # disjoint pools, none of the step's prompts
    assert not (refills[0] | refills[1]) & {10, 11, 12, 13}
