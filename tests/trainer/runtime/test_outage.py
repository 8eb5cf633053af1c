"""`OutageWatch` (trainer/runtime/outage.py) on a step's metrics as the loop hands them over: which steps are over
`rollout.max_infra_frac`, the warning line that names the kinds and counts, the stop after `rollout.infra_patience`
such steps in a row; and `env.sandbox_max_failing_steps`, the key it replaces. A real outage through a whole run is
tests/trainer/runtime/test_sandbox_outage.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.trajectory import INFRA_FAILURE_REASONS
from trainer.config.errors import ConfigError
from trainer.config.run_config import RUN_CONFIG_FILE, write_run_config
from trainer.runtime.outage import INFRA_KINDS, OVER_BOUND_KEY, OutageWatch
from trainer.setup.build import build_config
from trainer.setup.saved_config import load_run_config

ROOT = Path(__file__).resolve().parents[3]
URL = "http://127.0.0.1:8123"


def step_metrics(episodes: int, **failed: float) -> dict[str, float]:
    """A step's `rollout/infra_*` metrics as settle_infra_failures logs them: counts by reason, and their share."""
    counts = {f"rollout/infra_failures/{r}": float(failed.get(r, 0)) for r in INFRA_FAILURE_REASONS}
    return counts | {"rollout/infra_frac": sum(failed.values()) / episodes, "rollout/reward": 0.0}


def test_every_failure_reason_has_a_kind_to_name():
    assert set(INFRA_KINDS) == set(INFRA_FAILURE_REASONS)
    assert sorted(INFRA_KINDS.values()) == ["context", "engine", "harness", "sandbox", "timeout"]


def test_steps_over_the_bound_warn_then_stop_after_the_patience():
    watch = OutageWatch(max_frac=0.5, patience=3, sandbox_url=URL)
    at_bound = watch.after_step(1, step_metrics(16, sandbox_error=8))  # 8 of 16 is not over a half
    assert (at_bound.warning, at_bound.stop, at_bound.metrics) == (None, None, {OVER_BOUND_KEY: 0.0})
    first = watch.after_step(2, step_metrics(16, sandbox_error=9))
    assert first.metrics == {OVER_BOUND_KEY: 1.0} and first.stop is None
    assert first.warning.startswith(f"the sandbox at {URL} failed 56% of step 2's episodes (sandbox 9), over "
                                    "rollout.max_infra_frac=0.5")
    assert f"curl {URL}/v1/ping" in first.warning and first.warning.endswith("this is 1")
    assert "\n" not in first.warning
    assert watch.after_step(3, step_metrics(16, sandbox_error=16)).warning.endswith("this is 2")
    stop = watch.after_step(4, step_metrics(16, sandbox_error=16))
    assert stop.warning is None and stop.metrics == {OVER_BOUND_KEY: 1.0}
    assert "3 steps in a row (rollout.infra_patience=3); the checkpoint of step 4 is kept" in stop.stop
    assert stop.stop.endswith("then rerun with --resume (rollout.infra_patience=0 never stops)")


def test_a_step_under_the_bound_starts_the_count_again():
    watch = OutageWatch(max_frac=0.0, patience=2)  # 0: any infrastructure failure counts
    assert watch.after_step(1, step_metrics(8, episode_timeout=1)).warning.endswith("this is 1")
    assert watch.after_step(2, step_metrics(8)).metrics == {OVER_BOUND_KEY: 0.0}
    assert watch.after_step(3, step_metrics(8, episode_timeout=1)).stop is None  # one in a row again
    assert watch.after_step(4, step_metrics(8, episode_timeout=1)).stop is not None


def test_the_largest_kind_names_what_failed_and_the_way_out():
    watch = OutageWatch(max_frac=0.5, patience=0, sandbox_url=URL, harness="my.agent:play")
    engine = watch.after_step(1, step_metrics(8, engine_error=5, sandbox_error=1)).warning
    assert engine.startswith("the engine failed 75% of step 1's episodes (sandbox 1, engine 5)")
    assert "engine's log" in engine and engine.endswith("rollout.infra_patience=0: the run goes on")
    harness = watch.after_step(2, step_metrics(4, harness_error=4)).warning
    assert harness.startswith("the harness my.agent:play failed 100%") and "info['harness_error']" in harness
    context = watch.after_step(3, step_metrics(4, context_overflow=3)).warning
    assert "the engine's context failed 75%" in context and "rollout.max_obs_tokens" in context
    for step in range(4, 10):  # patience 0: never a stop
        assert watch.after_step(step, step_metrics(4, sandbox_error=4)).stop is None
    local = OutageWatch(max_frac=0.5, patience=1).after_step(1, step_metrics(2, sandbox_error=2)).stop
    assert local.startswith("the in-process sandbox executor (env.sandbox_url empty) failed 100%")


def test_the_replaced_key_is_refused_naming_its_successor_and_saved_configs_still_load(tmp_path):
    with pytest.raises(ConfigError, match=r"'env\.sandbox_max_failing_steps' moved to 'rollout\.infra_patience'"):
        build_config(None, ["env.sandbox_max_failing_steps=2"])
    cfg = build_config(None, ["rollout.infra_patience=5", "rollout.max_infra_frac=0.2"])
    assert (cfg.rollout.infra_patience, cfg.rollout.max_infra_frac) == (5, 0.2)
    for bad in ("rollout.max_infra_frac=1.5", "rollout.infra_patience=-1"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            build_config(None, [bad])
    write_run_config(tmp_path, build_config(None))
    path = tmp_path / RUN_CONFIG_FILE
    data = yaml.safe_load(path.read_text())
    del data["rollout"]["infra_patience"]
    data["env"]["sandbox_max_failing_steps"] = 0  # as alprl wrote it before the key moved: never stop
    path.write_text(yaml.safe_dump(data))
    assert load_run_config(tmp_path).rollout.infra_patience == 0
    old = ROOT / "docs/experiments/alp_acting/warm_start"  # the committed warm start's, written before the move
    assert yaml.safe_load((old / RUN_CONFIG_FILE).read_text())["env"]["sandbox_max_failing_steps"] == 3
    assert load_run_config(old).rollout.infra_patience == 3
