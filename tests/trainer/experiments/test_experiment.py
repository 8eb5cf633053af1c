"""`alprl experiment`: the plan (suites, settings, comparisons, refused arguments) and, at smoke scale, the alp suite
end to end from the shared tiny warm start: report files, resuming after a kill, one run directory per cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.cli import main, parse_args
from app.experiments import run as experiment_run
from app.experiments.archive import ARCHIVE, read_archive
from app.experiments.run import build_plan, cell_config
from app.experiments.suites import OFFPOLICY_2026, SUITES, alp_primary, thirds
from evaluation.reports.experiment_figures import ROBUSTNESS_FIGURE
from evaluation.reports.experiment_report import mipu_rows, scale_words
from evaluation.reports.experiment_stats import (
    compare,
    judged,
    mipu_rollbacks,
    tag_problems,
    training_summary,
)
from evaluation.reports.run_report import write_report
from trainer.runtime.run_meta import source_commit

ALP_METHODS = ["grpo", "seq_bypass", "seq_mis", "token_mis", "token_alp", "seq_alp", "dppo_tv", "vespo", "vcpo",
               "minpro", "ctpo"]


def plan_of(*argv: str):
    return build_plan(parse_args(["experiment", *argv]))


def test_thirds_split_the_decoder_layers_into_early_middle_late():
    assert thirds(4) == {"early": "0", "middle": "1-2", "late": "3"}
    assert thirds(6) == {"early": "0-1", "middle": "2-3", "late": "4-5"}
    assert thirds(3) == {"early": "0", "middle": "1", "late": "2"}


def test_every_suite_plans_cells_whose_configs_validate(tmp_path):
    for name in SUITES:  # build_plan builds every cell's config, so a bad preset/setting pair fails here
        plan = plan_of(name, "--scale", "smoke", "--out", str(tmp_path / name))
        settings = {c.setting for c in plan.cells}  # a setting may name the methods it runs (alp's fp16: GRPO)
        assert len(plan.cells) == sum(len(s.methods or SUITES[name].methods) for s in settings)
        assert len({c.name for c in plan.cells}) == len(plan.cells)


def test_comparisons_pair_each_arm_with_its_baseline(tmp_path):
    alp = plan_of("alp", "--scale", "smoke", "--seeds", "0,1", "--out", str(tmp_path / "a"))
    claim = [(f"{a}/lag2", f"{b}/lag2") for a in ("token_alp", "seq_alp") for b in ("seq_bypass", "token_mis",
                                                                                   "seq_mis", "dppo_tv")]
    fp16 = [("grpo/lag2_fp16", f"{m}/lag2") for m in ("grpo", "token_mis", "seq_bypass", "token_alp")]
    assert alp.comparisons() == [(f"{m}/lag2", "grpo/lag2") for m in ALP_METHODS[1:]] + claim + fp16
    assert {c.seed for c in alp.cells} == {0, 1} and len(alp.cells) == 24  # 11 methods at lag 2, GRPO in fp16
    primary = [pair for pair in alp.comparisons() if alp_primary(*pair)]  # 2026's methods against GRPO: exploratory
    assert primary and not any(a.split("/")[0] in OFFPOLICY_2026 for a, _ in primary)
    fp16_cell = next(c for c in alp.cells if c.setting.name == "lag2_fp16")
    cfg = cell_config(alp.config, alp.cell_overrides(fp16_cell))
    assert (cfg.algo.name, cfg.rollout.dtype, cfg.distributed.mixed_precision, cfg.rollout.policy_lag) == (
        "grpo", "float16", "fp16", 2)
    layers = plan_of("layers", "--scale", "smoke", "--out", str(tmp_path / "l"))
    assert [b for _, b in layers.comparisons()] == ["seq_alp/layers_all"] * 4 + ["seq_alp/logits_only"] * 3
    stale = plan_of("staleness", "--scale", "smoke", "--out", str(tmp_path / "s"))
    lrs = {c.setting.name: c.setting.overrides[-1] for c in stale.cells}
    assert lrs["lag0"] == "optim.lr=0.0001" and lrs["lag0_lr3x"] == "optim.lr=0.0003"  # demo lr 1e-4
    assert ("quatro/lag2", "grpo/lag2") in stale.comparisons()


@pytest.mark.parametrize("argv, says", [
    (["nope"], "unknown suite 'nope'; valid: alp, layers"),
    (["alp", "--seeds", "0,x"], "--seeds '0,x': expected distinct non-negative integers"),
    (["alp", "--seeds", "1,1"], "--seeds '1,1'"),
    (["alp", "--scale", "huge"], "unknown --scale 'huge'; valid: smoke, default, full"),
    (["alp", "rollout.policy_lag=1"], "the alp suite sets rollout.policy_lag itself"),
    (["alp", "seed=3"], "sets seed itself"),
    (["alp", "eval_tasks=0"], "eval_tasks=0: an experiment compares held-out success"),
])
def test_bad_arguments_exit_2_with_one_line(argv, says, tmp_path, capsys):
    assert main(["experiment", "--exploratory", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and err.startswith("alprl experiment: error:")
    assert not (tmp_path / "experiment.json").exists()  # refused before anything ran


def test_verdicts_follow_the_interval_over_runs():
    # 40 tasks x 2 samples per seed, 5 seeds; the arm wins task i in both samples for i < 30 (28, 30, 29, 30), the
    # baseline for i < 10 (12, 10, 11, 10): per-seed differences +0.5, +0.4, +0.5, +0.45, +0.5, mean +0.47; the
    # mirror comparison is worse by as much
    def records(solved: list[int]) -> list[dict]:
        return [r for s, k in enumerate(solved) for r in tag_problems(
            [{"index": i, "won": i < k} for i in range(40) for _ in range(2)], s)]

    arm, base = records([30, 28, 30, 29, 30]), records([10, 12, 10, 11, 10])
    better, worse = judged([compare(arm, base, "primary"), compare(base, arm, "primary")])
    assert better["diff"] == pytest.approx(0.47) and better["problems"] == 200
    assert better["verdict"] == "better" and worse["verdict"] == "worse"
    assert better["per_seed"] == pytest.approx({"0": 0.5, "1": 0.4, "2": 0.5, "3": 0.45, "4": 0.5})
    assert better["arm_success"] == pytest.approx(0.735)
    assert better["holm_level"] in (0.025, 0.05) and better["corrected_ci_lo"] > 0


def test_the_summary_names_the_seeds_that_finished_not_the_plans():
    plan = {"scale": "default", "steps": 10, "seeds": [1, 2, 0]}
    one_seed = {"grpo/recipe": {"problems": 100, "seeds": [1]}, "sprpo/recipe": {"problems": 100, "seeds": [1]}}
    assert scale_words(plan, one_seed) == "default scale, 10 RL steps, 1 seed × 100 held-out tasks"
    two_seeds = {"grpo/recipe": {"problems": 200, "seeds": [1, 2]}, "sprpo/recipe": {"problems": 100, "seeds": [1]}}
    assert scale_words(plan, two_seeds) == "default scale, 10 RL steps, 2 seeds × 100 held-out tasks"
    assert scale_words(plan, {}) == "default scale, 10 RL steps, 3 seeds × 0 held-out tasks"


def test_mipu_screening_is_counted_per_cell_and_reported_per_arm():
    """Each cell's metrics log `mipu/accepted` once per screened step (1 kept, 0 rolled back); step 0 is the
    evaluation at the start, never screened."""
    def cell(accepted: list[int]) -> list[dict]:
        return [{"step": 0, "mipu/accepted": 0}] + [{"step": i + 1, "mipu/accepted": a} for i, a in enumerate(accepted)]

    runs = [cell([1, 0, 1, 1]), cell([0, 0, 1, 1])]
    assert mipu_rollbacks(runs) == [1, 2] and mipu_rollbacks([[{"step": 1, "rollout/reward": 0.5}]]) == []
    t = training_summary(runs)
    assert (t["mipu_screened"], t["mipu_kept"]) == (4, 2.5)  # means over the two cells
    arms = {"mipu/quant_int3": {"training": t, "success": 0.6, "mipu_rolled_back_per_seed": [1, 2]},
            "grpo/quant_int3": {"training": training_summary([[{"step": 1, "rollout/reward": 0.5}]]), "success": 0.7}}
    assert mipu_rows({"arms": arms}) == [["mipu/quant_int3", "4.0", "2.5", "1.5", "1, 2", "0.600"]]


def _files_of(cell_dir):
    return {p: p.stat().st_mtime_ns for p in cell_dir.rglob("*") if p.is_file()}


@pytest.mark.smoke
def test_alp_smoke_runs_reports_and_resumes_after_a_kill(tmp_path, sft_dir, capsys, monkeypatch):
    out = tmp_path / "alp"
    argv = ["experiment", "--exploratory", "alp", "--scale", "smoke", "--no-progress", "--out", str(out), f"model.path={sft_dir}"]
    assert main(argv) == 0, capsys.readouterr().err
    for name in ("report.html", "report.json", "report.md"):
        assert (out / name).stat().st_size > 0
    data = json.loads((out / "report.json").read_text())
    assert list(data["arms"]) == [f"{m}/lag2" for m in ALP_METHODS] + ["grpo/lag2_fp16"]
    cells_planned = len(ALP_METHODS) + 1  # every method at lag 2, GRPO in fp16
    assert data["cells_finished"] == data["cells_planned"] == cells_planned and data["start"] == str(sft_dir)
    for arm in data["arms"].values():
        assert arm["eval_ci_lo"] <= arm["success"] <= arm["eval_ci_hi"] and arm["problems"] == 4
        assert arm["ci_lo"] is None  # one seed: no run-to-run noise measured
        assert set(arm["pass_at_k"]) == {"1", "2"} and arm["training"]["mismatch_kl_mean"] is not None
    against_grpo = len(ALP_METHODS) - 1  # then ALP's 8 claim pairs and GRPO in fp16 against 4 arms in bf16
    assert [c["baseline"] for c in data["comparisons"]][:against_grpo] == ["grpo/lag2"] * against_grpo
    assert len(data["comparisons"]) == against_grpo + 8 + 4
    for c in data["comparisons"]:
        assert c["eval_ci_lo"] <= c["diff"] <= c["eval_ci_hi"] and c["verdict"] == "one seed: no verdict"
        assert c["family"] in ("primary", "exploratory")
        assert c["summary"].startswith("At this scale") and c["arm"] in c["summary"]
    assert "Paired differences" in (out / "report.md").read_text()
    # each cell names the code it ran and when (from its run_meta.json), and the report lists them
    assert [c["cell"] for c in data["cells"]] == [c["name"] for c in json.loads((out / "experiment.json").read_text())
                                                  ["cells"]]
    assert all(c["commit"] == (source_commit() or {}).get("commit") and c["started"] for c in data["cells"])
    assert "## Cells" in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "Held-out success per arm" in html and "Figure 5: held-out pass@k" in html

    # A kill mid-way: one cell stopped before its cell.json, one never started. The rerun runs those two only.
    cells = sorted(p.parent for p in out.glob("*/cell.json"))
    half_done, never_started, kept = cells[0], cells[1], cells[2:]
    (half_done / "cell.json").unlink()
    (half_done / "left_by_the_kill.txt").write_text("partial")
    shutil.rmtree(never_started)
    before = {cell: _files_of(cell) for cell in kept}
    # A second kill, after the rerun's first cell: report.json / report.md already cover the cells finished so far.
    for name in ("report.html", "report.json", "report.md"):
        (out / name).unlink()
    real_run_cell, calls = experiment_run.run_cell, []

    def killed_after_one_cell(plan, cell):
        if calls:
            raise KeyboardInterrupt
        calls.append(cell.name)
        return real_run_cell(plan, cell)

    monkeypatch.setattr(experiment_run, "run_cell", killed_after_one_cell)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    monkeypatch.setattr(experiment_run, "run_cell", real_run_cell)
    partial = json.loads((out / "report.json").read_text())
    assert len(calls) == 1 and calls[0] in (half_done.name, never_started.name)
    (left,) = {half_done.name, never_started.name} - set(calls)
    assert partial["cells_missing"] == [left] and partial["cells_finished"] == cells_planned - 1
    assert f"(missing: {left})" in (out / "report.md").read_text()
    assert not (out / "report.html").exists()  # figures are drawn once, when the experiment ends
    assert main(argv) == 0, capsys.readouterr().err
    assert {cell: _files_of(cell) for cell in kept} == before  # finished cells untouched
    for cell in (half_done, never_started):
        assert (cell / "cell.json").is_file() and (cell / "eval" / "step_2.jsonl").is_file()
    # the half-done cell had its last checkpoint: it continued from there (nothing left to train) instead of
    # starting over, so its directory, stray file included, was kept
    assert json.loads((half_done / "cell.json").read_text())["resumed_from_step"] == 2
    assert (half_done / "left_by_the_kill.txt").exists()
    assert len(json.loads((out / "report.json").read_text())["arms"]) == cells_planned
    # each cell is an ordinary run directory: `alprl report` overlays them
    assert write_report([cells[0], cells[-1]], out=tmp_path / "overlay.html").stat().st_size > 0


@pytest.mark.smoke
def test_robustness_suite_sweeps_each_final_checkpoint(tmp_path, sft_dir, capsys):
    # the TIR recipe instead of the household one: the shared tiny warm start serves it, and the sweep's path
    # (final checkpoint → robustness records → retention rows in the report) is the same
    out = tmp_path / "rob"
    assert main(["experiment", "--exploratory", "robustness", "--scale", "smoke", "--config", "configs/demo.yaml", "--steps", "1",
                 "--no-progress", "--out", str(out), f"model.path={sft_dir}"]) == 0, capsys.readouterr().err
    data = json.loads((out / "report.json").read_text())
    assert list(data["arms"]) == ["grpo/recipe", "sprpo/recipe", "seq_alp/recipe"]
    for arm in data["arms"].values():
        rows = {r["condition"]: r for r in arm["robustness"]}
        assert "clean@0.0" in rows and "quant@int4" in rows and all(r["problems"] == 2 for r in rows.values())
        assert all(r["ci_lo"] <= r["success"] <= r["ci_hi"] for r in rows.values())
    assert "Robustness of the final checkpoints" in (out / "report.md").read_text()
    assert f"<img alt='{ROBUSTNESS_FIGURE}'" in (out / "report.html").read_text()  # the sweep, overlaid per arm
    assert (out / "grpo__recipe__seed0" / "robustness" / "robustness.html").is_file()


@pytest.mark.smoke
def test_results_dir_keeps_the_cells_a_new_machine_reports_without_training(tmp_path, sft_dir, capsys,
                                                                           monkeypatch):
    """--results keeps each finished cell's small files and the report; with `runs/` gone (a new machine), the same
    command restores them, trains nothing, and rebuilds the same report."""
    out, kept = tmp_path / "runs" / "rob", tmp_path / "docs" / "rob"
    argv = ["experiment", "--exploratory", "robustness", "--scale", "smoke", "--config", "configs/demo.yaml", "--steps", "1",
            "--methods", "grpo,sprpo", "--no-progress", "--out", str(out), "--results", str(kept),
            f"model.path={sft_dir}"]
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert json.loads((kept / "report.json").read_text()) == report and (kept / "report.md").is_file()
    archived = read_archive(kept / ARCHIVE)
    for cell in ("grpo__recipe__seed0", "sprpo__recipe__seed0"):
        files = set(archived[cell])
        assert {"cell.json", "metrics.jsonl", "run_meta.json", "robustness/records.jsonl"} <= files
        assert json.loads(archived[cell]["cell.json"])["final_eval"] in files
        assert (out / cell / "checkpoints").is_dir()
    # small files only: no checkpoint, no HTML or PNG (the report's figures are drawn again from the kept records)
    kept_names = [*(p.name for p in kept.rglob("*")), *(f for files in archived.values() for f in files)]
    assert not [n for n in kept_names if Path(n).suffix in (".safetensors", ".pt", ".html", ".png")]

    shutil.rmtree(tmp_path / "runs")  # a new machine: only the committed folder is left
    monkeypatch.setattr(experiment_run, "run_cell", lambda plan, cell: pytest.fail(f"{cell.name} trained again"))
    monkeypatch.setattr(experiment_run, "warm_start", lambda plan, show: pytest.fail("warm start rebuilt"))
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "report.md").read_text() == (kept / "report.md").read_text()
    assert f"<img alt='{ROBUSTNESS_FIGURE}'" in (out / "report.html").read_text()

    # one more seed in another --out: the kept seed-0 cells count as finished there, and only seed 1 is to train
    class Stop(Exception):
        pass

    trained = []

    def record_and_stop(plan, cell):
        trained.append(cell.name)
        raise Stop

    monkeypatch.setattr(experiment_run, "run_cell", record_and_stop)
    monkeypatch.setattr(experiment_run, "warm_start", lambda plan, show: None)
    argv_more = [str(tmp_path / "elsewhere") if a == str(out) else a for a in argv]
    argv_more[argv_more.index("--steps"):argv_more.index("--steps")] = ["--seeds", "0,1"]
    capsys.readouterr()
    assert main(argv_more) == 1  # each cell that trains fails here (Stop), and the suite names them at the end
    assert sorted(trained) == ["grpo__recipe__seed1", "sprpo__recipe__seed1"]
    assert "2 of 2 cells failed: grpo__recipe__seed1 (Stop)" in capsys.readouterr().err
    assert (tmp_path / "elsewhere" / "grpo__recipe__seed0" / "cell.json").is_file()

    # the cells left must train from the weights the kept ones did: another warm start is refused with one line
    record = json.loads((kept / "warm_start.json").read_text())
    (kept / "warm_start.json").write_text(json.dumps(record | {"sha256": "0" * 64}))
    trained.clear()
    capsys.readouterr()
    assert main(argv_more) == 2 and not trained
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not the one the cells in" in err and str(sft_dir) in err


@pytest.mark.smoke
def test_a_cell_killed_mid_way_resumes_from_its_last_checkpoint(tmp_path, sft_dir, capsys, monkeypatch):
    from trainer import loop

    out = tmp_path / "long"
    argv = ["experiment", "--exploratory", "alp", "--scale", "smoke", "--methods", "grpo", "--settings", "lag2", "--steps", "3",
            "--save-every", "1", "--no-progress", "--out", str(out), f"model.path={sft_dir}"]
    real_step, steps_run = loop.train_step, []

    def killed_at_step_3(c, cfg, algos, step, rollouts):
        if step == 3:
            raise KeyboardInterrupt  # as Ctrl-C, SIGTERM (raised as SystemExit) or a killed machine mid-step
        steps_run.append(step)
        return real_step(c, cfg, algos, step, rollouts)

    monkeypatch.setattr(loop, "train_step", killed_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    cell = out / "grpo__lag2__seed0"
    assert steps_run == [1, 2] and not (cell / "cell.json").exists()
    assert (cell / "checkpoints" / "step_2").is_dir()
    before = (cell / "metrics.jsonl").read_text().splitlines()

    def counting(c, cfg, algos, step, rollouts):
        steps_run.append(step)
        return real_step(c, cfg, algos, step, rollouts)

    monkeypatch.setattr(loop, "train_step", counting)
    assert main(argv) == 0, capsys.readouterr().err
    assert steps_run == [1, 2, 3]  # only step 3 ran again
    info = json.loads((cell / "cell.json").read_text())
    assert info["resumed_from_step"] == 2 and info["final_metrics"]["eval/success"] >= 0
    after = (cell / "metrics.jsonl").read_text().splitlines()
    assert after[:2] == before[:2] and [json.loads(r)["step"] for r in after] == [1, 2, 3]

    # a half-done cell started under other overrides is not resumed: it starts over
    (cell / "cell.json").unlink()
    start = json.loads((cell / "cell_start.json").read_text())
    (cell / "cell_start.json").write_text(json.dumps({"overrides": [*start["overrides"], "optim.lr=0.5"]}))
    steps_run.clear()
    assert main(argv) == 0, capsys.readouterr().err
    assert steps_run == [1, 2, 3] and "resumed_from_step" not in json.loads((cell / "cell.json").read_text())


@pytest.mark.smoke
def test_a_failing_cell_leaves_the_others_running_and_names_itself_at_the_end(tmp_path, sft_dir, capsys):
    out = tmp_path / "alp"
    argv = ["experiment", "--exploratory", "alp", "--scale", "smoke", "--methods", "grpo,token_mis", "--settings", "lag2", "--steps",
            "1", "--no-progress", "--out", str(out), f"model.path={sft_dir}"]
    broken = "token_mis__lag2__seed0"
    out.mkdir()
    (out / broken).write_text("a file where the cell's run directory goes: the cell cannot start")
    # two at a time: the failure happens in a spawned worker, the other cell finishes beside it
    assert main([*argv, "--parallel", "2"]) == 1
    err = capsys.readouterr().err
    assert f"1 of 2 cells failed: {broken} (NotADirectoryError" in err and "Rerun the same command" in err
    assert str(out / "errors") in err and len(err.strip().splitlines()) == 1
    data = json.loads((out / "report.json").read_text())
    assert data["cells_finished"] == 1 and data["cells_missing"] == [broken] and (out / "report.html").is_file()
    trace = (out / "errors" / f"{broken}.txt").read_text()
    assert "Traceback" in trace and "NotADirectoryError" in trace and "run_cell" in trace  # the worker's own frames
    # one at a time, in this process: the same failure, the finished cell untouched
    assert main(argv) == 1 and f"1 of 1 cells failed: {broken}" in capsys.readouterr().err
    (out / broken).unlink()
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads((out / "report.json").read_text())["cells_finished"] == 2
    assert not (out / "errors" / f"{broken}.txt").exists()  # the retried cell's old failure is gone
