"""Training on a dataset file, before anything starts: epoch-style task selection (trainer/tasks.py) and the config
rules for env.dataset / env.eval_dataset (trainer/setup/file_checks.py, trainer/sft/train.py), through the CLI: exit 2 and one
line naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from app.cli import main
from trainer.setup.build import build_config
from trainer.tasks import episode_specs, train_indices, validation_specs

ROOT = Path(__file__).resolve().parents[2]


def write_qa(path: Path, n: int, split=None) -> Path:
    rows = [{"question": f"Compute {i} * 3.", "answer": str(3 * i), **({"split": split(i)} if split else {})}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(*overrides: str):
    return build_config(None, ["rollout.prompts_per_step=3", "rollout.group_size=2", "eval_tasks=0", *overrides])


def test_train_steps_go_through_the_file_once_per_epoch(tmp_path):
    cfg = _cfg(f"env.dataset={write_qa(tmp_path / 'd.jsonl', 10)}")
    steps = [train_indices(cfg, step, 3) for step in range(1, 7)]  # 10 // 3 = 3 steps per epoch, 1 row left over
    for epoch in (steps[:3], steps[3:]):
        rows = [i for batch in epoch for i in batch]
        assert len(rows) == len(set(rows)) == 9 and set(rows) <= set(range(10))
    assert steps[:3] != steps[3:]  # each epoch has its own shuffle
    assert steps == [train_indices(cfg, step, 3) for step in range(1, 7)]  # a pure function of (seed, step)
    other = _cfg(f"env.dataset={tmp_path / 'd.jsonl'}", "seed=1")
    assert [train_indices(other, step, 3) for step in range(1, 4)] != steps[:3]
    even = _cfg(f"env.dataset={tmp_path / 'd.jsonl'}", "rollout.prompts_per_step=5")
    assert Counter(i for step in (1, 2) for i in train_indices(even, step, 5)) == Counter(range(10))


def test_groups_are_by_index_and_mipu_validates_outside_the_batch(tmp_path):
    cfg = _cfg(f"env.dataset={write_qa(tmp_path / 'd.jsonl', 10)}", "algorithm=mipu")
    specs = episode_specs(cfg, "train", 2, 3, 2)
    assert [s.group_id for s in specs] == [0, 0, 1, 1, 2, 2]
    assert [s.options["index"] for s in specs[::2]] == train_indices(cfg, 2, 3)
    val = [s.options["index"] for s in validation_specs(cfg, 2)][::2]
    assert len(val) == 3 and not set(val) & set(train_indices(cfg, 2, 3)) and set(val) <= set(range(10))
    assert [s.options for s in episode_specs(cfg, "test", 1, 2, 1)] == [{"split": "test", "index": 0},
                                                                        {"split": "test", "index": 1}]


def _dry_run(capsys, *overrides: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["train", "--dry-run", *overrides])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": ""}\n')
    return {"small": write_qa(tmp_path / "small.jsonl", 6), "bad": tmp_path / "bad.jsonl",
            "gone": tmp_path / "gone.jsonl", "big": write_qa(tmp_path / "big.jsonl", 600),
            "split": write_qa(tmp_path / "split.jsonl", 12, split=lambda i: "test" if i < 4 else "train")}


REFUSED = [
    (["env.dataset={gone}"], "env.dataset", "gone.jsonl: no such file"),
    (["env.dataset={bad}"], "env.dataset", "bad.jsonl: row 2: field 'answer': empty answer"),
    (["env.eval_dataset={gone}"], "env.eval_dataset", "no such file"),
    (["env.dataset={small}", "eval_tasks=7"], "eval_tasks", "allowed: 0..6 (0: no evaluation; the test split of"),
    (["env.dataset={split}", "env.dataset_split_field=split", "eval_tasks=5"], "eval_tasks", "allowed: 0..4"),
    (["env.dataset={small}", "env.dataset_split_field=split"], "env.dataset", "field 'split': missing"),
    (["env.dataset={small}", "rollout.prompts_per_step=7", "eval_tasks=0"], "rollout.prompts_per_step",
     "exceeds the 6 problems"),
    (["env.dataset={small}", "eval_tasks=0", "algorithm=mipu", "rollout.prompts_per_step=4"], "algo.mipu_val_prompts",
     "has 6 train problems"),
    (["env.id=alprl/Household-v0", "env.dataset={small}"], "env.dataset", "does not serve dataset problems"),
    (["env.id=alprl/WebShop-v0", "env.eval_dataset={small}"], "env.eval_dataset", "does not serve dataset"),
    (["env.dataset={small}", "env.dataset_format=gsm9k"], "env.dataset_format", "not a dataset layout"),
    (["env.dataset_split_field=split"], "env.dataset_split_field", "which is not set"),
    (["env.dataset_format=qa"], "env.dataset_format", "needs env.dataset or env.eval_dataset"),
    (["env.dataset_fields.question=q"], "env.dataset_fields", "needs env.dataset or env.eval_dataset"),
    (["env.dataset_fields=7"], "env.dataset_fields", "expects a mapping"),
]


@pytest.mark.parametrize("overrides,key,says", REFUSED)
def test_dataset_settings_a_run_would_trip_over_are_refused_in_one_line(capsys, files, overrides, key, says):
    code, err = _dry_run(capsys, "rollout.prompts_per_step=3", *(o.format(**files) for o in overrides))
    assert code == 2 and len(err) == 1, err
    named = f"{key}=" in err[0] or f"config key '{key}'" in err[0]  # the config loader's type errors quote the key
    assert err[0].startswith("alprl train: error: ") and named and says in err[0], err[0]


def test_a_stray_dataset_option_and_the_generated_bound_are_reported_together(capsys):
    code, err = _dry_run(capsys, "env.dataset_format=qa", "eval_tasks=501")
    assert code == 2 and len(err) == 1 and "env.dataset_format=" in err[0] and "allowed: 0..500" in err[0], err


@pytest.mark.parametrize("overrides", [
    ["env.dataset={small}", "eval_tasks=6"],
    ["env.dataset={split}", "env.dataset_split_field=split", "eval_tasks=4", "env.dataset_format=qa"],
    ["env.eval_dataset={big}", "eval_tasks=600"],  # a held-out file larger than the generated test split
    ["env.id=alprl/Math-v0", "env.dataset={big}", "env.eval_dataset={small}", "eval_tasks=6"],
    ["env.id=alprl/Math-v0"],
    ["env.dataset={small}", "env.dataset_fields.question=question", "eval_tasks=6"],
    ["env.dataset={small}", "env.task_types=multiply", "env.difficulty=2", "eval_tasks=6"],  # generated only
])
def test_dataset_settings_that_fit_pass(capsys, files, overrides):
    code, err = _dry_run(capsys, "rollout.prompts_per_step=3", *(o.format(**files) for o in overrides))
    assert code == 0 and err == [], err


def test_the_installed_cli_refuses_a_missing_dataset_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--dry-run",
                           f"env.dataset={tmp_path / 'gone.jsonl'}"], capture_output=True, text=True, cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "env.dataset=" in lines[0] and proc.stdout == ""


@pytest.mark.parametrize("overrides,says", [
    (["env.dataset={big}", "eval_tasks=0"], "has no solution code"),
    (["env.id=alprl/ALFWorld-v0", "env.task_types=[]"], "no SFT expert for alprl/ALFWorld-v0"),  # real: use its twin
])
@pytest.mark.parametrize("command", [["sft"], ["sft", "--dry-run"], ["demo", "--dry-run"]])
def test_sft_refuses_what_its_expert_cannot_play_before_it_starts(capsys, files, tmp_path, overrides, says, command):
    capsys.readouterr()
    code = main([*command, "--no-progress", f"sft.output_dir={tmp_path / 'sft'}",
                 *(o.format(**files) for o in overrides)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "sft").exists()
