"""One order for every command: `alprl train --dry-run` and an `alprl experiment` cell build a recipe + preset the
same way (defaults ← preset ← recipe ← layered ← key=value); a cell differs only in what its suite states it sets
(its method's preset keys, layered above the recipe, and the cell's own overrides)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from app.cli import PLAN_SEPARATOR, main, parse_args
from app.experiments.run import build_plan, cell_config, method_layer
from trainer.config.train_config import CONFIG_DIR
from trainer.setup.build import build_config, preset_overrides


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def _dry_run(capsys, argv: list[str]) -> dict:
    assert main(["train", "--dry-run", *argv]) == 0
    return json.loads(capsys.readouterr().out.split(PLAN_SEPARATOR)[0])


# the household recipe keeps a loss_agg of its own over its preset's: the case where the two orders used to part
@pytest.mark.parametrize("recipe", ["household_tiny.yaml", "demo.yaml"])
@pytest.mark.parametrize("method", ["grpo", "token_alp", "vespo"])
def test_train_and_a_cell_differ_only_in_what_the_suite_states(recipe, method, tiny_model_dir, tmp_path, capsys):
    config = str(CONFIG_DIR / recipe)
    plan = build_plan(parse_args(["experiment", "alp", "--config", config, "--methods", method, "--seeds", "0",
                                  "--settings", "lag2", "--out", str(tmp_path)]))
    # a start --dry-run's memory plan can read (the household's SFT start is not built here)
    overrides = [*plan.cell_overrides(plan.cells[0]), f"model.path={tiny_model_dir}"]
    cell = _flat(asdict(cell_config(plan.config, overrides)))
    train = _flat(_dry_run(capsys, ["--config", config, *overrides]))
    stated = {o.split("=", 1)[0] for o in method_layer(overrides)}
    differ = {key for key in cell if cell[key] != train[key]}
    assert differ <= stated, differ - stated
    # stated on alprl train's command line, the layer gives the cell's config exactly
    layered = _flat(_dry_run(capsys, ["--config", config, *overrides[:1], *method_layer(overrides), *overrides[1:]]))
    assert layered == cell


def test_the_recipes_own_key_is_what_the_layer_restates():
    recipe = str(CONFIG_DIR / "household_tiny.yaml")
    assert build_config(recipe, ["algorithm=grpo"]).algo.loss_agg == "seq-mean-token-mean"
    assert cell_config(recipe, ["algorithm=grpo"]).algo.loss_agg == "token-mean"
    assert "algo.loss_agg=token-mean" in method_layer(["algorithm=grpo"])


def test_a_preset_as_key_value_pairs_reads_back_as_the_preset():
    for name in ("token_alp", "sprpo", "vcpo", "ctpo"):
        assert build_config(None, [f"algorithm={name}"]) == build_config(None, preset_overrides(name)
                                                                         + [f"algorithm={name}"])
        assert build_config(None, [], layered=preset_overrides(name)).perturb == \
            build_config(None, [f"algorithm={name}"]).perturb


def test_the_cells_overrides_win_over_the_layer():
    cfg = cell_config(str(CONFIG_DIR / "demo.yaml"), ["algorithm=grpo", "algo.clip_high=0.4"])
    assert cfg.algo.clip_high == 0.4 and cfg.algo.clip_low == 0.2
