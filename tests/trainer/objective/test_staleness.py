"""Per-token policy versions: every sampled token records the version the engine held, the staleness metrics read
them, and `rollout.max_token_version_gap` leaves tokens (or episodes) older than the bound out of the loss."""

from __future__ import annotations

import json

import pytest
from tiny_tir import SMALL

from agents.trajectory import Trajectory
from app.cli import main
from trainer.algorithms.staleness import mask_stale_tokens, staleness_metrics


def _episode(versions: list[int]) -> Trajectory:
    """An episode of one-token turns sampled by `versions`, an observation token after each."""
    t = Trajectory(prompt_ids=[1, 2])
    for k, v in enumerate(versions):
        t.append_turn([10 + k], [-0.5], f"s{k}", version=v)
        t.append([99], None)
    return t


def test_versions_are_recorded_per_token_and_observations_have_none():
    t = _episode([3, 3, 5])
    assert t.token_versions == [3, -1, 3, -1, 5, -1]
    t.start_trace([7, 8], "compaction")
    t.append_turn([20], [-0.1], "s3", version=6)
    assert t.earlier[0].token_versions == [3, -1, 3, -1, 5, -1] and t.token_versions == [6]
    assert Trajectory.from_dict(__import__("dataclasses").asdict(t)).earlier[0].token_versions[4] == 5


def test_staleness_metrics_by_hand():
    one_version, two_versions = _episode([4, 4]), _episode([2, 4, 4])
    # at trainer version 5: gaps 1, 1 and 3, 1, 1 -> mean 7/5, max 3; one of two episodes spans two versions
    assert staleness_metrics([one_version, two_versions], 5) == {
        "rollout/token_staleness_mean": pytest.approx(7 / 5), "rollout/token_staleness_max": 3.0,
        "rollout/multi_version_frac": 0.5}


def test_the_bound_masks_only_the_old_tokens_or_drops_their_episode():
    kept, mixed = _episode([4, 4]), _episode([2, 4, 4])
    m = mask_stale_tokens([kept, mixed], current=5, max_gap=2, policy="mask")
    assert m == {"rollout/stale_masked_frac": pytest.approx(1 / 5)}  # the version-2 token, 3 behind
    assert mixed.loss_mask == [0, 0, 1, 0, 1, 0] and mixed.rollout_logprobs[0] == 0.0 and kept.loss_mask[0] == 1
    assert mixed.info["stale_masked"] == 1
    dropped = _episode([2, 4, 4])
    m = mask_stale_tokens([_episode([4]), dropped], current=5, max_gap=2, policy="drop_episode")
    assert m == {"rollout/stale_masked_frac": pytest.approx(3 / 4)}
    assert dropped.loss_mask == [0] * 6 and dropped.info["masked_by"] == "stale_tokens"
    assert mask_stale_tokens([_episode([0])], current=9, max_gap=0, policy="mask") == {}  # 0: no bound


def test_a_lagged_run_records_its_lag_per_token_and_the_bound_masks_it(tmp_path, sft_dir, capsys):
    run = tmp_path / "run"
    # rollout.policy_lag=2: step s samples with the weights after update max(0, s - 3), the trainer holds s - 1
    code = main(["train", "--no-progress", *SMALL, f"sft.output_dir={sft_dir}", f"output_dir={run}", "steps=4",
                 "save_every=4", "eval_tasks=0", "rollout.policy_lag=2", "rollout.max_token_version_gap=1",
                 "rollout.prompts_per_step=2", "rollout.group_size=2"])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/token_staleness_max"] for r in records] == [0.0, 1.0, 2.0, 2.0]
    assert [r["rollout/token_staleness_mean"] for r in records] == [0.0, 1.0, 2.0, 2.0]
    assert [r["rollout/multi_version_frac"] for r in records] == [0.0] * 4  # one version a batch without partials
    assert [r["rollout/stale_masked_frac"] for r in records] == [0.0, 0.0, 1.0, 1.0]  # 2 behind > the bound 1
