"""A run whose every GRPO group had one reward for `degenerate_patience` steps says so in one line, and with
`--fail-on-degenerate` stops there (exit status 6, the step's checkpoint kept); `--no-progress` prints a plain line
a step."""

from __future__ import annotations

import json

from tiny_tir import SMALL

from app.cli import main
from trainer.diagnostics.degenerate import EXIT_DEGENERATE, DegenerateWatch

FLAT = {"adv/degenerate_group_frac": 1.0, "rollout/reward": 0.0}
MIXED = {"adv/degenerate_group_frac": 0.5, "rollout/reward": 0.25}


def test_the_watch_speaks_once_a_streak_at_its_patience():
    watch = DegenerateWatch(patience=3, fail=False)
    said = [watch.after_step(step, m) for step, m in enumerate([FLAT, FLAT, MIXED, FLAT, FLAT, FLAT, FLAT], 1)]
    warnings = [(step, w) for step, (w, stop) in enumerate(said, 1) if w]
    assert [step for step, _ in warnings] == [6]  # the first streak broke at step 3; the second reached 3 at 6
    assert "steps 4-6" in warnings[0][1] and "mean 0.000" in warnings[0][1]
    assert all(stop is None for _, stop in said)


def test_the_watch_stops_with_fail_and_never_checks_at_patience_zero():
    assert DegenerateWatch(patience=2, fail=True).after_step(1, FLAT) == (None, None)
    watch = DegenerateWatch(patience=2, fail=True)
    watch.after_step(1, FLAT)
    warning, stop = watch.after_step(2, FLAT)
    assert warning is None and "checkpoint of step 2 is kept" in stop
    off = DegenerateWatch(patience=0, fail=True)
    assert all(off.after_step(s, FLAT) == (None, None) for s in range(1, 20))
    assert DegenerateWatch(patience=1, fail=False).after_step(1, {"rollout/reward": 0.0}) == (None, None)  # no groups


def test_fail_on_degenerate_stops_the_run_in_one_line_and_no_progress_prints_a_line_a_step(tmp_path, sft_dir, capsys):
    run = tmp_path / "run"
    # one sampled token a turn can never answer: every group's members all get reward 0
    code = main(["train", "--no-progress", "--fail-on-degenerate", *SMALL, f"sft.output_dir={sft_dir}",
                 f"output_dir={run}", "steps=5", "save_every=5", "eval_tasks=0", "degenerate_patience=2",
                 "rollout.max_new_tokens=1", "rollout.prompts_per_step=2", "rollout.group_size=2"])
    out, err = capsys.readouterr()
    assert code == EXIT_DEGENERATE
    (line,) = [x for x in err.splitlines() if x.startswith("alprl train: error:")]
    assert "every GRPO group was degenerate for 2 steps in a row (steps 1-2" in line and "step 2 is kept" in line
    assert [x.split()[1] for x in out.splitlines() if x.startswith("RL ")] == ["1/5", "2/5"]  # a line a step
    assert (run / "checkpoints" / "step_2").is_dir()
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(r["adv/degenerate_group_frac"] == 1.0 for r in records)
