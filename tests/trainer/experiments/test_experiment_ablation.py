"""The ablation and sensitivity suites: their plans and comparisons, `--methods/--settings/--parallel/--reuse`,
and the ablation at smoke scale end to end (two cells at a time, two cells reused from an alp run)."""

from __future__ import annotations

import json

import pytest

from app.cli import main, parse_args
from app.experiments.run import build_plan
from app.experiments.suites import ABLATION_RELATIVE_SIGMA
from evaluation.reports.experiment_figures import SIGMA_FIGURE

REL = f"rel{ABLATION_RELATIVE_SIGMA:g}"


def plan_of(*argv: str):
    return build_plan(parse_args(["experiment", *argv]))


def test_the_ablation_is_loss_level_by_clip_by_noise_under_lag_2(tmp_path):
    plan = plan_of("ablation", "--scale", "smoke", "--out", str(tmp_path))
    assert len(plan.cells) == 2 * 2 * 3
    assert {c.setting.name for c in plan.cells} == {f"{clip}_{noise}" for clip in ("clip0.2-0.28", "clip0.5-3")
                                                    for noise in ("off", "abs1e-06", REL)}
    wide_abs = next(c for c in plan.cells if c.arm == "token_bypass/clip0.5-3_abs1e-06")
    cfg_overrides = plan.cell_overrides(wide_abs)
    assert {"rollout.policy_lag=2", "algo.clip_low=0.5", "algo.clip_high=3", "perturb.enabled=true",
            "perturb.sigma_mode=absolute", "perturb.sigma_init=1e-06"} <= set(cfg_overrides)
    pairs = plan.comparisons()
    # (a) the noise against no noise at the same loss and clip; (b) the clip at the same loss and noise
    assert ("token_bypass/clip0.5-3_abs1e-06", "token_bypass/clip0.5-3_off") in pairs
    assert (f"seq_bypass/clip0.2-0.28_{REL}", "seq_bypass/clip0.2-0.28_off") in pairs
    assert ("token_bypass/clip0.5-3_off", "token_bypass/clip0.2-0.28_off") in pairs
    assert ("token_bypass/clip0.5-3_abs1e-06", "token_bypass/clip0.2-0.28_off") in pairs  # Token-ALP vs -Bypass
    assert len(pairs) == len(set(pairs)) == 2 * (4 + 3) + 1 + 6


def test_sensitivity_is_token_alp_over_both_modes_and_two_learning_rates(tmp_path):
    plan = plan_of("sensitivity", "--scale", "smoke", "--seeds", "0,1", "--out", str(tmp_path))
    assert len(plan.cells) == 2 * 11 * 2 and {c.method for c in plan.cells} == {"token_alp"}
    assert {"rel0.05_lr0.01", "abs0.001_lr0.0005", "rel1e-06_lr0.0005"} <= {c.setting.name for c in plan.cells}
    seq = plan_of("sensitivity", "--scale", "smoke", "--methods", "seq_alp", "--settings",
                  "rel0.01_lr0.0005,abs1e-06_lr0.0005", "--out", str(tmp_path / "s"))
    assert [c.arm for c in seq.cells] == ["seq_alp/rel0.01_lr0.0005", "seq_alp/abs1e-06_lr0.0005"]
    assert seq.comparisons() == [("seq_alp/rel0.01_lr0.0005", "seq_alp/abs1e-06_lr0.0005")]


@pytest.mark.parametrize("argv, says", [
    (["ablation", "--settings", "clip9_off"], "--settings 'clip9_off': unknown setting(s) clip9_off; valid: "
                                              "clip0.2-0.28_off"),
    (["ablation", "--parallel", "0"], "--parallel 0: expected a positive number"),
    (["ablation", "algo.clip_low=0.3"], "the ablation suite sets algo.clip_low"),
    (["ablation", "--reuse", "/nonexistent/alp"], "--reuse /nonexistent/alp: no such experiment directory"),
])
def test_bad_arguments_exit_2_with_one_line(argv, says, tmp_path, capsys):
    assert main(["experiment", "--exploratory", *argv, "--scale", "smoke", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


@pytest.mark.smoke
def test_ablation_smoke_runs_two_at_a_time_and_reuses_the_alp_suites_same_runs(tmp_path, sft_dir, capsys):
    alp = tmp_path / "alp"
    assert main(["experiment", "--exploratory", "alp", "--scale", "smoke", "--methods", "token_alp,seq_bypass", "--no-progress",
                 "--out", str(alp), f"model.path={sft_dir}"]) == 0, capsys.readouterr().err
    out = tmp_path / "ablation"
    settings = f"clip0.5-3_off,clip0.5-3_abs1e-06,clip0.5-3_{REL}"  # the narrow clip's cells are the same code path
    assert main(["experiment", "--exploratory", "ablation", "--scale", "smoke", "--parallel", "2", "--reuse", str(alp),
                 "--settings", settings, "--no-progress", "--out", str(out), f"model.path={sft_dir}"]) == 0, \
        capsys.readouterr().err
    cells = {json.loads(p.read_text())["cell"]: json.loads(p.read_text()) for p in out.glob("*/cell.json")}
    assert len(cells) == 6
    reused = {name: c["reused_from"] for name, c in cells.items() if "reused_from" in c}
    assert reused == {"token_bypass__clip0.5-3_abs1e-06__seed0": str(alp / "token_alp__lag2__seed0"),
                      "seq_bypass__clip0.5-3_off__seed0": str(alp / "seq_bypass__lag2__seed0")}
    copied = out / "token_bypass__clip0.5-3_abs1e-06__seed0" / "eval" / "step_2.jsonl"
    assert copied.read_text() == (alp / "token_alp__lag2__seed0" / "eval" / "step_2.jsonl").read_text()
    data = json.loads((out / "report.json").read_text())
    assert data["cells_finished"] == 6 and len(data["comparisons"]) == 2 * 2 + 3
    noised = data["arms"][f"token_bypass/clip0.5-3_{REL}"]["training"]
    assert noised["rel_noise_mean"] == pytest.approx(ABLATION_RELATIVE_SIGMA, rel=0.3)  # bf16-realized
    assert noised["dp_p99_mean"] > 0 and data["arms"]["token_bypass/clip0.5-3_off"]["training"]["dp_p99_mean"] is None
    md = (out / "report.md").read_text()
    assert "## The perturbation against the sampler's mismatch" in md
    # a rerun with another thread count resumes the same cells (nothing left to run)
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/cell.json")}
    assert main(["experiment", "--exploratory", "ablation", "--scale", "smoke", "--settings", settings, "--no-progress", "--out",
                 str(out), f"model.path={sft_dir}", "torch_threads=2"]) == 0, capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/cell.json")} == stamps


@pytest.mark.smoke
def test_sensitivity_smoke_draws_figure_9(tmp_path, sft_dir, capsys):
    out = tmp_path / "sens"
    settings = "rel0.001_lr0.0005,rel0.05_lr0.0005,abs1e-06_lr0.0005"
    assert main(["experiment", "--exploratory", "sensitivity", "--scale", "smoke", "--steps", "1", "--settings", settings,
                 "--no-progress", "--out", str(out), f"model.path={sft_dir}"]) == 0, capsys.readouterr().err
    data = json.loads((out / "report.json").read_text())
    dp = {arm: a["training"]["dp_p99_mean"] for arm, a in data["arms"].items()}
    assert dp["token_alp/rel0.05_lr0.0005"] > dp["token_alp/rel0.001_lr0.0005"] > dp["token_alp/abs1e-06_lr0.0005"]
    assert f"<img alt='{SIGMA_FIGURE}'" in (out / "report.html").read_text()
