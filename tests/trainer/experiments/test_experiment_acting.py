"""The alp_acting suite: Token-ALP with a perturbation that acts, its exact noise-free twin and GRPO under lag 4 for
200 steps on five seeds, with its primary comparisons declared in the plan before any cell runs."""

from __future__ import annotations

import json
from dataclasses import asdict

from app.cli import parse_args
from app.experiments.run import build_plan, cell_config
from app.experiments.suites import ACTING_ALP, ACTING_GRPO, ACTING_TWIN


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def test_three_arms_five_seeds_200_steps_under_lag_4(tmp_path):
    plan = build_plan(parse_args(["experiment", "alp_acting", "--out", str(tmp_path)]))
    assert plan.steps == 200 and plan.seeds == [0, 1, 2, 3, 4] and len(plan.cells) == 15
    assert [c.arm for c in plan.cells[:3]] == [ACTING_GRPO, ACTING_ALP, ACTING_TWIN]
    for cell in plan.cells[:3]:
        cfg = cell_config(plan.config, plan.cell_overrides(cell))
        assert (cfg.rollout.policy_lag, cfg.eval_every, cfg.diagnostics.every) == (4, 25, 1)


def test_the_twin_differs_from_alp_in_the_perturbation_alone(tmp_path):
    plan = build_plan(parse_args(["experiment", "alp_acting", "--seeds", "0", "--out", str(tmp_path)]))
    by_arm = {c.arm: _flat(asdict(cell_config(plan.config, plan.cell_overrides(c)))) for c in plan.cells}
    alp, twin = by_arm[ACTING_ALP], by_arm[ACTING_TWIN]
    differ = {key for key in alp if alp[key] != twin[key]}
    assert differ == {"output_dir", "algo.name", "perturb.enabled", "perturb.sigma_init", "perturb.sigma_mode"}
    assert (alp["perturb.enabled"], alp["perturb.sigma_mode"], alp["perturb.sigma_init"]) == (True, "relative", 0.1)
    assert (twin["algo.clip_low"], twin["algo.clip_high"], twin["algo.policy_loss"]) == (0.5, 3.0, "bypass")


def test_its_primary_family_is_declared_in_the_plan_before_the_run(tmp_path):
    plan = build_plan(parse_args(["experiment", "alp_acting", "--seeds", "0", "--out", str(tmp_path)]))
    described = json.loads(json.dumps(plan.describe()))
    assert described["primary"] == [[ACTING_ALP, ACTING_TWIN], [ACTING_ALP, ACTING_GRPO]]
    assert [ACTING_TWIN, ACTING_GRPO] in described["comparisons"]


def test_every_suite_declares_a_primary_family_inside_its_comparisons(tmp_path):
    alp = build_plan(parse_args(["experiment", "alp", "--seeds", "0", "--out", str(tmp_path / "a")]))
    primary = alp.primary()
    assert len(primary) == 8 and set(primary) < set(alp.comparisons())
    assert ("dppo_tv/lag2", "grpo/lag2") not in primary and ("token_alp/lag2", "seq_mis/lag2") in primary
    mismatch = build_plan(parse_args(["experiment", "mismatch", "--seeds", "0", "--out", str(tmp_path / "m")]))
    assert {a for a, _ in mismatch.primary()} == {f"mipu/quant_{q}" for q in ("none", "int8", "int4", "int3")}
