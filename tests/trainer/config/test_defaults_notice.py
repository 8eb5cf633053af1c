"""`alprl eval` and `alprl robustness` on a model with no run config say so: one line on stderr naming the defaults.

Real parts: the tiny random Qwen2 model saved without an alprl_config.yaml (tests/conftest.py), the real commands
through `app.cli.main` with the transformers engine on one task and a few tokens; then the same weights with a run
config written beside them, where the line must not appear.
"""

from __future__ import annotations

import json
import shutil

import pytest

from app.cli import main
from trainer.config.run_config import RUN_CONFIG_FILE, write_run_config
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke

NOTICE = f"no {RUN_CONFIG_FILE} beside"
SHORT = ["rollout.max_response_tokens=16", "rollout.max_new_tokens=8"]


def _notices(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if NOTICE in line]


@pytest.fixture()
def with_run_config(tiny_model_dir, tmp_path):
    """The tiny model's weights with a run config beside them (a run that played multiply only)."""
    model = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model)
    write_run_config(model, build_config(None, ["env.task_types=[multiply]", *SHORT]))
    return model


def _robustness(model, out, *extra: str) -> list[str]:
    return ["robustness", "--checkpoint", str(model), "--perturb", "noise", "--scales", "noise=0.5", "--tasks", "1",
            "--out", str(out), *extra]


def test_robustness_without_a_run_config_names_the_defaults_once(tiny_model_dir, tmp_path, capsys):
    assert main(_robustness(tiny_model_dir, tmp_path / "rob", *SHORT)) == 0
    lines = _notices(capsys)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"alprl robustness: no {RUN_CONFIG_FILE} beside {tiny_model_dir}: evaluating with "
                           "alprl's defaults (env alprl/TIRMath-v0, task types all, max_turns 3, 16 response tokens")
    assert "key=value overrides" in line and "--config" not in line  # the command has no --config
    meta = json.loads((tmp_path / "rob" / "meta.json").read_text())
    assert meta["settings_from"] == "alprl defaults (no run config)"


def test_robustness_with_a_run_config_says_nothing(with_run_config, tmp_path, capsys):
    assert main(_robustness(with_run_config, tmp_path / "rob")) == 0
    assert _notices(capsys) == []
    assert json.loads((tmp_path / "rob" / "meta.json").read_text())["settings_from"].endswith(RUN_CONFIG_FILE)


def test_robustness_told_to_ignore_the_run_config_says_nothing(tiny_model_dir, capsys):
    from app.cli import build_parser, robustness_settings

    robustness_settings(build_parser().parse_args(["robustness", "--checkpoint", str(tiny_model_dir),
                                                   "--no-run-config"]))
    assert _notices(capsys) == []  # the defaults were asked for


def _eval(model, out) -> list[str]:
    return ["eval", "--model", str(model), "--bench", "math", "--mode", "single", "--k", "1", "--tasks", "1",
            "--max-tokens", "8", "--engine", "hf", "--out", str(out), "--no-progress"]


def test_eval_without_a_run_config_names_the_defaults_once(tiny_model_dir, tmp_path, capsys):
    assert main(_eval(tiny_model_dir, tmp_path / "eval")) == 0
    lines = _notices(capsys)
    assert len(lines) == 1, lines
    # single mode on a plain model: the one turn gets the whole response budget (app/eval_plan.py)
    assert lines[0].startswith(f"alprl eval: no {RUN_CONFIG_FILE} beside {tiny_model_dir}: evaluating with alprl's "
                               "defaults (env alprl/Math-v0, task types all, max_turns 3, 8 response tokens (8 per "
                               "turn), 1 sample per task, temperature 1, seed 0); ")


def test_eval_with_a_run_config_says_nothing(with_run_config, tmp_path, capsys):
    assert main(_eval(with_run_config, tmp_path / "eval")) == 0
    assert _notices(capsys) == []
