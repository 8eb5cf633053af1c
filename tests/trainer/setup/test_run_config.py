"""A checkpoint carries its run config, and `alprl robustness` evaluates it the way its run did.

Real parts: a tiny SFT warm start, one real GRPO step with held-out evaluation (HF engine, fp32, greedy), the
checkpoint it writes, and the real `alprl robustness` command on that checkpoint.
"""

from __future__ import annotations

import json

import pytest
from tiny_tir import SMALL

from app.cli import main
from trainer.config.errors import ConfigError
from trainer.config.run_config import RUN_CONFIG_FILE
from trainer.config.train_config import to_dict
from trainer.loop import train
from trainer.setup.build import build_config
from trainer.setup.saved_config import eval_settings, load_run_config

pytestmark = pytest.mark.smoke

EVAL = ["eval_tasks=8", "eval_samples=2", "eval_greedy=true", "rollout.dtype=float32"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, sft_dir):
    run = tmp_path_factory.mktemp("run")
    cfg = build_config(None, SMALL + EVAL + [f"sft.output_dir={sft_dir}", f"output_dir={run}", "steps=1",
                                             "save_every=1"])
    train(cfg, show_progress=False)
    return cfg, run


def test_every_checkpoint_and_the_warm_start_hold_their_resolved_config(trained_run, sft_dir):
    cfg, run = trained_run
    saved = load_run_config(run / "checkpoints" / "step_1")
    assert saved is not None and to_dict(saved) == to_dict(cfg)
    assert eval_settings(saved) == eval_settings(cfg)
    warm = load_run_config(sft_dir)
    assert warm is not None and warm.env.task_types == ["multiply"]
    assert load_run_config(run) is None  # a directory without one: evaluated with the defaults


def test_robustness_clean_condition_reproduces_the_runs_own_held_out_records(trained_run, tmp_path, capsys):
    _, run = trained_run
    checkpoint = run / "checkpoints" / "step_1"
    out = tmp_path / "rob"
    assert main(["robustness", "--checkpoint", str(checkpoint), "--perturb", "noise", "--scales", "noise=0.5",
                 "--tasks", "8", "--out", str(out)]) == 0
    clean = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    clean = [r for r in clean if r["condition"] == "clean@0.0"]
    own = [json.loads(line) for line in (run / "eval" / "step_1.jsonl").read_text().splitlines()]
    keys = ("index", "task_id", "task_type", "won", "turns", "tool_calls", "response_tokens")
    # same tasks (multiply only, as the run's env.task_types), same turn limit, same greedy episodes
    assert [{k: r[k] for k in keys} for r in clean] == [{k: r[k] for k in keys} for r in own]
    assert all(r["task_type"] == "multiply" and r["turns"] <= 3 for r in clean)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings_from"] == str(checkpoint / RUN_CONFIG_FILE)
    assert meta["samples_per_task"] == 2 and meta["greedy"] is True
    success = sum(r["won"] for r in own) / len(own)
    assert meta["run's own held-out success on these tasks"] == pytest.approx(success)
    summary = json.loads((out / "robustness.json").read_text())
    assert summary["clean_success"] == pytest.approx(success)
    # what the terminal shows: a line per condition as it finishes, then the table with every interval
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"robustness of {checkpoint}: 2 conditions (clean first), each on the same 8 tasks × 2 samples"
    assert printed[1].startswith(f"[1/2] clean@0.0: success {100 * success:.1f}% of 16 episodes, ")
    noise = summary["conditions"][1]
    assert printed[2].startswith(f"[2/2] noise@0.5: success {100 * noise['success']:.1f}% of 16 episodes, "
                                 f"{100 * noise['change']:+.1f} points vs clean, probe KL ")
    table = printed[printed.index("") + 1:]
    assert table[0].split("  ")[0] == "condition" and table[-1] == f"report: {out / 'robustness.html'}"
    lo, hi = noise["change_ci"]
    assert table[2].split()[:5] == ["noise@0.5", f"{100 * noise['success']:.1f}",
                                    f"[{100 * noise['success_ci'][0]:.1f},", f"{100 * noise['success_ci'][1]:.1f}]",
                                    f"{100 * noise['change']:+.1f}"]
    assert f"[{100 * lo:+.1f}, {100 * hi:+.1f}]" in table[2] and table[1].startswith("clean@0.0 ")


def test_options_and_overrides_change_the_run_config(trained_run, tmp_path):
    from app.cli import build_parser, robustness_settings

    _, run = trained_run
    ckpt = str(run / "checkpoints" / "step_1")
    args = build_parser().parse_args(["robustness", "--checkpoint", ckpt, "--sample", "--samples", "3",
                                      "env.max_turns=5"])
    settings, meta = robustness_settings(args)
    assert (settings.greedy, settings.samples_per_task, settings.env.max_turns) == (False, 3, 5)
    assert settings.env.task_types == ["multiply"]
    other = robustness_settings(build_parser().parse_args(["robustness", "--checkpoint", ckpt, "--env", "household"]))
    assert other[0].env.id == "alprl/Household-v0" and other[0].greedy and other[1]["settings_from"].startswith("alprl")
    plain = robustness_settings(build_parser().parse_args(["robustness", "--checkpoint", ckpt, "--no-run-config"]))
    assert plain[0].env.task_types == [] and plain[0].samples_per_task == 1


def test_an_unreadable_run_config_is_one_error_naming_the_file(tmp_path, capsys):
    (tmp_path / RUN_CONFIG_FILE).write_text("seed: 0\nnot_a_key: 1\n")
    with pytest.raises(ConfigError, match=f"{tmp_path / RUN_CONFIG_FILE}: unknown config key 'not_a_key'"):
        load_run_config(tmp_path)
    assert main(["robustness", "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and RUN_CONFIG_FILE in err[0] and "--no-run-config" in err[0]


def test_evaluation_reads_a_run_config_without_its_training_file(tmp_path):
    held_out = tmp_path / "math500.jsonl"
    held_out.write_text("".join(json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i),
                                            "unique_id": f"t/{i}"}) + "\n" for i in range(8)))
    (tmp_path / RUN_CONFIG_FILE).write_text(f"env:\n  dataset: {tmp_path / 'gone.parquet'}\n"
                                            f"  eval_dataset: {held_out}\neval_tasks: 8\n")
    cfg = load_run_config(tmp_path)  # the training file is not here: evaluation plays the test split only
    assert cfg.env.eval_dataset == str(held_out) and cfg.env.dataset == ""
    assert load_run_config(tmp_path, ["eval_samples=3"]).eval_samples == 3
    held_out.unlink()
    with pytest.raises(ConfigError, match="math500.jsonl: no such file"):  # the file it does play must be there
        load_run_config(tmp_path)


def test_the_runs_own_gone_sandbox_service_falls_back_to_in_process_code_with_a_warning(trained_run, tmp_path,
                                                                                          capsys):
    import shutil
    import socket

    import yaml

    with socket.socket() as s:  # a loopback port nothing listens on: the demo's sandbox after the demo ended
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    # the run's own figure on a checkpoint whose run config names the gone service (trainer/setup/sandbox_check.py
    # checks a URL stated on the command line like a run's: tests/trainer/setup/test_sandbox_check.py)
    _, run = trained_run
    checkpoint = tmp_path / "step_1"
    shutil.copytree(run / "checkpoints" / "step_1", checkpoint)
    saved = yaml.safe_load((checkpoint / RUN_CONFIG_FILE).read_text())
    saved["env"]["sandbox_url"] = gone
    (checkpoint / RUN_CONFIG_FILE).write_text(yaml.safe_dump(saved, sort_keys=False))
    out = tmp_path / "rob"
    assert main(["robustness", "--checkpoint", str(checkpoint), "--perturb", "noise", "--scales", "noise=0.5",
                 "--tasks", "8", "--out", str(out)]) == 0
    assert f"alprl robustness: warning: the run's sandbox service {gone} does not answer" in capsys.readouterr().err
    clean = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    own = [json.loads(line) for line in (run / "eval" / "step_1.jsonl").read_text().splitlines()]
    assert [r["won"] for r in clean if r["condition"] == "clean@0.0"] == [r["won"] for r in own]
