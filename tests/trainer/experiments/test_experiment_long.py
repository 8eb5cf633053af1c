"""The long suite: its own steps, periodic evaluation and seeds per scale (--steps / --seeds / eval_every= still win),
the hook for a sixth arm, and at smoke scale end to end (4 steps, held-out success every 2, the counts and figures
in the report)."""

from __future__ import annotations

import json

import pytest

from app.cli import main, parse_args
from app.experiments import suites
from app.experiments.run import build_plan
from evaluation.reports.long_horizon_figures import (
    DYNAMICS_FIGURE,
    ENVELOPE_FIGURE,
    KL_FIGURE,
    SUCCESS_FIGURE,
)
from trainer.setup.build import build_config

METHODS = ["grpo", "seq_bypass", "token_mis", "seq_alp", "token_alp"]


def plan_of(*argv: str):
    return build_plan(parse_args(["experiment", *argv]))


def test_long_is_five_methods_for_200_steps_evaluated_every_25_on_seeds_0_1(tmp_path):
    plan = plan_of("long", "--out", str(tmp_path))
    assert plan.steps == 200 and plan.seeds == [0, 1] and len(plan.cells) == 10
    assert [c.arm for c in plan.cells[:5]] == [f"{m}/lag2" for m in METHODS]
    overrides = plan.cell_overrides(plan.cells[0])
    assert {"rollout.policy_lag=2", "diagnostics.every=1", "steps=200", "save_every=25"} <= set(overrides)
    cfg = build_config(plan.config, overrides)
    assert (cfg.eval_every, cfg.rollout.policy_lag, cfg.diagnostics.every) == (25, 2, 1)
    pairs = plan.comparisons()
    assert [b for a, b in pairs[:4]] == ["grpo/lag2"] * 4
    assert ("token_alp/lag2", "seq_bypass/lag2") in pairs and ("seq_alp/lag2", "token_mis/lag2") in pairs
    assert plan.describe()["horizon_report"] is True


def test_steps_seeds_and_eval_every_given_by_the_user_win(tmp_path):
    plan = plan_of("long", "--steps", "50", "--seeds", "3", "eval_every=10", "--out", str(tmp_path))
    assert plan.steps == 50 and plan.seeds == [3]
    assert build_config(plan.config, plan.cell_overrides(plan.cells[0])).eval_every == 10


def test_the_smoke_scale_runs_4_steps_evaluated_every_2_and_other_suites_keep_the_scales_steps(tmp_path):
    smoke = plan_of("long", "--scale", "smoke", "--out", str(tmp_path / "l"))
    assert smoke.steps == 4 and smoke.seeds == [0]
    assert build_config(smoke.config, smoke.cell_overrides(smoke.cells[0])).eval_every == 2
    alp = plan_of("alp", "--out", str(tmp_path / "a"))
    assert alp.steps == 10 and alp.seeds == [0, 1, 2] and alp.describe()["horizon_report"] is False
    assert build_config(alp.config, alp.cell_overrides(alp.cells[0])).eval_every == 0


def test_the_tuned_perturbation_is_one_sixth_arm(tmp_path, monkeypatch):
    monkeypatch.setattr(suites, "LONG_PERTURBATION", ("token_alp", suites.noise_overrides("relative", 0.1)))
    plan = plan_of("long", "--seeds", "0", "--out", str(tmp_path))
    assert [c.arm for c in plan.cells] == [f"{m}/lag2" for m in METHODS] + ["token_alp/lag2_tuned"]
    cfg = build_config(plan.config, plan.cell_overrides(plan.cells[-1]))
    assert (cfg.perturb.sigma_mode, cfg.perturb.sigma_init, cfg.rollout.policy_lag) == ("relative", 0.1, 2)
    pairs = plan.comparisons()
    assert {("token_alp/lag2_tuned", b) for b in ("grpo/lag2", "seq_bypass/lag2", "token_mis/lag2",
                                                  "token_alp/lag2")} <= set(pairs)


def test_lag4_runs_only_when_named_and_compares_within_its_own_sampler(tmp_path):
    assert all(c.arm.endswith("/lag2") for c in plan_of("long", "--out", str(tmp_path / "d")).cells)
    plan = plan_of("long", "--settings", "lag4", "--methods", "grpo,seq_bypass,seq_alp", "--out",
                   str(tmp_path / "h"))
    assert [c.arm for c in plan.cells] == ["grpo/lag4", "seq_bypass/lag4", "seq_alp/lag4"] * 2
    assert build_config(plan.config, plan.cell_overrides(plan.cells[0])).rollout.policy_lag == 4
    # Token-MIS did not run: no pair against it
    assert plan.comparisons() == [("seq_bypass/lag4", "grpo/lag4"), ("seq_alp/lag4", "grpo/lag4"),
                                  ("seq_alp/lag4", "seq_bypass/lag4")]


def test_lag4_adds_2026s_off_policy_methods_vespo_and_vcpo_primary_against_grpo(tmp_path):
    plan = plan_of("long", "--settings", "lag4", "--seeds", "0", "--out", str(tmp_path))
    assert [c.arm for c in plan.cells] == [f"{m}/lag4" for m in [*METHODS, *suites.OFFPOLICY_2026]]
    for cell in plan.cells[len(METHODS):]:
        cfg = build_config(plan.config, plan.cell_overrides(cell))
        assert (cfg.algo.name, cfg.rollout.policy_lag) == (cell.method, 4)
    pairs = plan.comparisons()
    new = [(f"{m}/lag4", "grpo/lag4") for m in suites.OFFPOLICY_2026]
    assert set(new) <= set(pairs)
    # declared before their lag-4 cells ran: the papers' claims (VESPO, VCPO) are primary, MinPRO and CTPO not
    assert [suites.long_primary(*pair) for pair in new] == [m in ("vespo", "vcpo") for m in suites.OFFPOLICY_2026]
    assert all(c.arm.endswith("/lag2") and c.method in METHODS for c in plan_of("long", "--out", str(tmp_path / "d")).cells)


def test_the_synchronous_grpo_runs_only_when_named_and_every_lag4_arm_is_compared_with_it(tmp_path):
    plan = plan_of("long", "--settings", "lag4,lag0", "--methods", "grpo,vcpo,token_alp", "--seeds", "0",
                   "--out", str(tmp_path))
    assert [c.arm for c in plan.cells] == ["grpo/lag4", "vcpo/lag4", "token_alp/lag4", "grpo/lag0"]
    assert build_config(plan.config, plan.cell_overrides(plan.cells[-1])).rollout.policy_lag == 0
    pairs = plan.comparisons()
    sync = [p for p in pairs if p[1] == "grpo/lag0"]
    assert sync == [("grpo/lag4", "grpo/lag0"), ("vcpo/lag4", "grpo/lag0"), ("token_alp/lag4", "grpo/lag0")]
    assert not any(suites.long_primary(*p) for p in sync)  # reaching the synchronous result is read, not tested
    assert suites.long_primary("vcpo/lag4", "grpo/lag4") and suites.long_primary("token_alp/lag4", "grpo/lag4")
    assert plan.describe()["reach"] == "grpo/lag0"  # the report counts the steps each run took to reach it
    without = plan_of("long", "--settings", "lag4", "--methods", "grpo,vcpo", "--seeds", "0", "--out", str(tmp_path))
    assert "reach" not in without.describe()  # no synchronous arm, nothing to reach: experiment.json as before


@pytest.mark.smoke
def test_long_smoke_reports_counts_and_figures_over_the_horizon(tmp_path, sft_dir, capsys):
    out = tmp_path / "long"
    assert main(["experiment", "--exploratory", "long", "--scale", "smoke", "--no-progress", "--out", str(out),
                 f"model.path={sft_dir}"]) == 0, capsys.readouterr().err
    data = json.loads((out / "report.json").read_text())
    assert data["steps"] == 4 and data["cells_finished"] == 5
    horizon = data["long_horizon"]
    assert list(horizon["arms"]) == [f"{m}/lag2" for m in METHODS] and len(horizon["runs"]) == 5
    for run in horizon["runs"]:
        records = [json.loads(line) for line in (out / run["cell"] / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if "eval/success" in r] == [2, 4]  # the periodic evaluation ran
        for key in horizon["keys"].values():  # every per-step key is logged, ALP's last-mini-batch r_byp too
            assert sum(key in r for r in records) >= (2 if key == "eval/success" else 4), (run["cell"], key)
        assert run["median_kl"] > 0 and run["best_success"] is not None
        assert run["kl_spikes"]["count"] >= 0 and run["collapse"]["first_step"] in (None, 4)
        cell = json.loads((out / run["cell"] / "cell.json").read_text())
        assert cell["engine"] == "hf"  # the smoke scale's rollout.engine=hf, recorded as the engine that sampled
    assert "## Over the whole horizon: spikes and collapses" in (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for title in (ENVELOPE_FIGURE, KL_FIGURE, DYNAMICS_FIGURE, SUCCESS_FIGURE):
        assert f"<img alt='{title}'" in page
