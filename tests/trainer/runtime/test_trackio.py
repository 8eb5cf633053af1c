"""`logging.trackio`: the run's metrics and a table of sampled episodes in a real local Trackio project, read back
from its SQLite store; the `logging` section's keys (top-level `wandb` refused, an old run config still read).

The training run is a subprocess (`alprl train`) because Trackio reads $TRACKIO_DIR once, when it is imported: a
fresh process with a temporary TRACKIO_DIR is the only way to be sure nothing lands in the user's home."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_tir import SMALL

from agents.trajectory import Trajectory
from app.cli import main
from trainer.config.errors import ConfigError
from trainer.config.run_config import RUN_CONFIG_FILE, write_run_config
from trainer.diagnostics.episode_table import EPISODE_COLUMNS, EPISODE_TABLE_ROWS, episode_table, sampled_rows
from trainer.loop import train
from trainer.runtime.logger import MetricLogger, TrackioSink, read_metrics, require_logger_packages
from trainer.setup.build import build_config
from trainer.setup.saved_config import load_run_config

ROOT = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------------ the `logging` keys


def test_top_level_wandb_is_refused_naming_logging_wandb(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"'wandb' moved to 'logging\.wandb'") as info:
        build_config(None, ["wandb=true"])
    assert "\n" not in str(info.value)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("wandb: false\n")
    with pytest.raises(ConfigError, match="put 'wandb:' under 'logging:'"):
        build_config(recipe)
    assert main(["train", "--dry-run", "wandb=true"]) == 2  # the CLI: one line, exit 2, nothing started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "logging.wandb" in err[0]
    cfg = build_config(None, ["logging.wandb=true", "logging.trackio=true", "logging.project=mine"])
    assert (cfg.logging.wandb, cfg.logging.trackio, cfg.logging.project) == (True, True, "mine")


def test_a_run_config_saved_before_the_move_still_loads(tmp_path):
    write_run_config(tmp_path, build_config(None))
    path = tmp_path / RUN_CONFIG_FILE
    data = yaml.safe_load(path.read_text())
    data.pop("logging")
    data["wandb"] = True  # as alprl wrote it before `logging` existed
    path.write_text(yaml.safe_dump(data))
    assert load_run_config(tmp_path).logging.wandb is True
    # the committed warm start's run config, written before the move
    old = ROOT / "docs/experiments/alp_acting/warm_start"
    assert "wandb" in yaml.safe_load((old / RUN_CONFIG_FILE).read_text())
    assert load_run_config(old).logging.wandb is False


def test_a_missing_trackio_is_one_line_naming_the_extra_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trackio", None)  # import trackio → ImportError, find_spec → None
    with pytest.raises(ConfigError) as info:
        require_logger_packages(wandb=False, trackio=True)
    message = str(info.value)
    assert "\n" not in message and "pip install -e '.[trackio]'" in message and "logging.trackio=false" in message
    cfg = build_config(None, ["logging.trackio=true", f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match="trackio is not installed"):
        train(cfg)
    with pytest.raises(ConfigError, match="trackio is not installed"):
        MetricLogger(tmp_path / "run", use_trackio=True)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ the episode table


def test_sampled_rows_are_evenly_spaced_over_the_batch():
    assert sampled_rows(16) == [0, 4, 8, 12]  # one per group of 4 in a 4 × 4 batch
    assert sampled_rows(6) == [0, 1, 3, 4]
    assert sampled_rows(3) == [0, 1, 2] and sampled_rows(0) == []


def test_episode_table_decodes_prompt_turns_tool_outputs_and_reward(tiny_tokenizer):
    def ids(text):
        return tiny_tokenizer.encode(text, add_special_tokens=False)

    call, result, answer = "Let me compute it.\n```python\nprint(4821 * 937)\n```", \
        "\nCode execution result: 4517277\n", "The answer is \\boxed{4517277}."
    t = Trajectory(prompt_ids=ids("Compute 4821 * 937."), reward=1.0)
    t.append_turn(ids(call), [-0.5] * len(ids(call)), "s0")
    t.append(ids(result), None)  # the tool's output: not sampled, between the turns
    t.append_turn(ids(answer), [-0.5] * len(ids(answer)), "s1")
    lone = Trajectory(prompt_ids=ids("Solve 3*x + 17 = 62 for x."), reward=0.0)
    lone.append_turn(ids("The answer is \\boxed{15}."), [-0.5] * len(ids("The answer is \\boxed{15}.")), "s0")
    rows = episode_table([t, lone], tiny_tokenizer)
    assert rows == [
        ["Compute 4821 * 937.", f"[1] {call}\n\n[2] {answer}", "[1] Code execution result: 4517277", 1.0],
        ["Solve 3*x + 17 = 62 for x.", "[1] The answer is \\boxed{15}.", "", 0.0],
    ]
    assert len(rows[0]) == len(EPISODE_COLUMNS)


# ------------------------------------------------------------------------------------------ a real Trackio run


def _store_rows(db: Path) -> tuple[list[str], dict[int, dict]]:
    """(run names, step → every metric logged at that step) from a Trackio project's SQLite file."""
    with sqlite3.connect(db) as conn:
        runs = sorted({name for (name,) in conn.execute("SELECT run_name FROM metrics")})
        by_step: dict[int, dict] = {}
        for step, metrics in conn.execute("SELECT step, metrics FROM metrics ORDER BY id"):
            by_step.setdefault(step, {}).update(json.loads(metrics))
    return runs, by_step


@pytest.mark.smoke
def test_trackio_gets_the_metrics_jsonl_values_and_an_episode_table_every_eval_every_steps(tmp_path, sft_dir):
    run_dir, store = tmp_path / "run", tmp_path / "trackio"
    env = {**os.environ, "TRACKIO_DIR": str(store), "HF_HOME": str(tmp_path / "hf")}
    overrides = [*SMALL, f"sft.output_dir={sft_dir}", f"output_dir={run_dir}", "steps=3", "eval_every=2",
                 "save_every=100", "torch_threads=1", "logging.trackio=true", "logging.project=alprl-test"]
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--no-progress", *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    runs, logged = _store_rows(store / "alprl-test.db")
    assert len(runs) == 1
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3] and sorted(logged) == [1, 2, 3]
    for record in records:  # every scalar of every step, as metrics.jsonl holds it (null: not finite)
        mine = logged[record["step"]]
        for key, value in record.items():
            if key == "step":
                continue
            if value is None:
                assert mine[key] in ("NaN", "Infinity", "-Infinity"), key
            else:
                assert mine[key] == value, key
    assert {"rollout/reward", "loss/policy", "actor/grad_norm"} <= records[0].keys()

    key = TrackioSink.TABLE_KEY
    tables = {step: metrics[key] for step, metrics in logged.items() if key in metrics}
    assert sorted(tables) == [2, 3]  # eval_every=2, and the last step
    for table in tables.values():
        assert table["_type"] == "trackio.table"
        rows = table["_value"]
        assert len(rows) == EPISODE_TABLE_ROWS and all(list(row) == EPISODE_COLUMNS for row in rows)
        for row in rows:
            assert row["prompt"] and row["turns"].startswith("[1] ") and 0.0 <= row["reward"] <= 1.0
            assert isinstance(row["tool_outputs"], str) and math.isfinite(row["reward"])
    assert any("Code execution result" in row["tool_outputs"] for t in tables.values() for row in t["_value"])
