import subprocess
import sys
from pathlib import Path

import pytest
from shipped_configs import data_overrides, shipped_configs

from app.cli import main
from trainer.config.errors import ConfigError
from trainer.config.train_config import CONFIG_DIR
from trainer.setup.build import build_config

ROOT = Path(__file__).resolve().parents[3]


def test_overrides_and_types():
    cfg = build_config(None, ["optim.lr=1e-3", "rollout.group_size=4", "env.task_types=multiply,add"])
    assert cfg.optim.lr == 1e-3 and cfg.rollout.group_size == 4 and cfg.env.task_types == ["multiply", "add"]


@pytest.mark.parametrize("bad,needle", [
    (["optim.lrr=1"], "unknown config key 'optim.lrr'"),
    (["optim.lr=fast"], "'optim.lr' expects float"),
    (["algorithm=nope"], "unknown algorithm 'nope'"),
    (["env.mask_void_turns=maybe"], "expects true/false"),
    (["algo.policy_loss=bogus"], "algo.policy_loss='bogus' is not a policy loss; valid: "),  # a value, validated
])
def test_bad_keys_raise_one_line(bad, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        build_config(None, bad)
    assert "\n" not in str(info.value)


def test_every_config_file_loads(tmp_path):
    files = shipped_configs()
    assert files, "configs/ should hold at least the demo config"
    for path in files:
        build_config(path, data_overrides(path, tmp_path))
    for preset in sorted((CONFIG_DIR / "algorithms").glob("*.yaml")):
        assert build_config(None, [f"algorithm={preset.stem}"]).algo.name == preset.stem


def test_cli_bad_key_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--dry-run", "optim.bogus=1"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "optim.bogus" in lines[0] and "lr" in lines[0]


def test_cli_dry_run_prints_resolved_config(capsys):
    assert main(["train", "--dry-run", "optim.lr=0.01", "algorithm=grpo"]) == 0
    out = capsys.readouterr().out
    assert '"lr": 0.01' in out and '"name": "grpo"' in out


def test_sft_cache_key_follows_what_the_expert_plays(monkeypatch, tmp_path):
    from agents.formats.household_agent import HouseholdAgent
    from trainer.sft.cache import sft_fingerprint

    base = sft_fingerprint(build_config(None, ["env.id=alprl/Household-v0"]))
    for changed in (["env.expert_epsilon=0.3"], ["env.max_steps=7"], ["sft.lr=1e-4"], ["model.num_layers=3"],
                    ["rollout.max_obs_tokens=17"]):
        assert sft_fingerprint(build_config(None, ["env.id=alprl/Household-v0", *changed])) != base, changed
    for same in (["env.sandbox_url=http://127.0.0.1:1"], ["rollout.engine=hf"], ["optim.lr=1e-5"],
                 ["sft.output_dir=/elsewhere"]):
        assert sft_fingerprint(build_config(None, ["env.id=alprl/Household-v0", *same])) == base, same
    # model.path: SFT fine-tunes that checkpoint, so the key follows the checkpoint (its path and files)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    at_path = ["env.id=alprl/Household-v0", f"model.path={tmp_path / 'ckpt'}"]
    keyed = sft_fingerprint(build_config(None, at_path))
    assert keyed != base and sft_fingerprint(build_config(None, [*at_path, "model.num_layers=3"])) == keyed
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"other weights")
    assert sft_fingerprint(build_config(None, at_path)) != keyed
    # a new text format (what the agent shows the model) invalidates warm starts built with the old one
    monkeypatch.setattr(HouseholdAgent, "format_version", HouseholdAgent.format_version + 1)
    assert sft_fingerprint(build_config(None, ["env.id=alprl/Household-v0"])) != base


def test_config_files_load_by_path_or_by_name_in_configs():
    by_name = build_config("household_tiny.yaml")
    assert by_name == build_config(CONFIG_DIR / "household_tiny.yaml") and by_name.env.id == "alprl/Household-v0"
    with pytest.raises(ConfigError, match="config file 'nope.yaml' not found; files in .*household_tiny.yaml"):
        build_config("nope.yaml")


def test_a_recipes_keys_win_over_its_preset_and_the_command_line_over_both(tmp_path):
    """defaults <- preset <- recipe <- key=value: the recipe's loss_agg stays under algorithm=grpo, whose own
    token-mean applies where the recipe says nothing; a key=value beats both."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: seq_bypass\nalgo:\n  loss_agg: seq-mean-token-mean\n  clip_low: 0.3\n")
    own = build_config(recipe)
    assert own.algo.name == "seq_bypass" and own.algo.policy_loss == "bypass" and own.algo.clip_low == 0.3
    swapped = build_config(recipe, ["algorithm=grpo"])  # the command line's preset takes the recipe's preset's place
    assert swapped.algo.name == "grpo" and swapped.algo.policy_loss == "ppo_clip"
    assert swapped.algo.loss_agg == "seq-mean-token-mean" and swapped.algo.clip_low == 0.3
    assert swapped.algo.clip_high == 0.28  # grpo's, which the recipe does not set
    assert build_config(recipe, ["algorithm=grpo", "algo.clip_low=0.1"]).algo.clip_low == 0.1


def test_a_note_names_the_recipe_keys_that_hide_a_preset_and_how_to_restore_them(tmp_path):
    from trainer.setup.build import preset_notes

    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: grpo\nalgo:\n  loss_agg: seq-mean-token-mean\n")
    assert preset_notes(recipe, []) == []  # its own preset: no surprise
    assert preset_notes(recipe, ["algorithm=grpo", "algo.loss_agg=token-mean"]) == []  # restored on the line
    [note] = preset_notes(recipe, ["algorithm=token_mis"])
    assert "algo.loss_agg=seq-mean-token-mean" in note and "add algo.loss_agg=token-mean" in note
    # and the restoring override does run the preset's value
    assert build_config(recipe, ["algorithm=token_mis", "algo.loss_agg=token-mean"]).algo.loss_agg == "token-mean"


def test_a_recipe_naming_an_unknown_preset_is_refused_with_its_path(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: grpoo\n")
    with pytest.raises(ConfigError, match=r"r\.yaml: algorithm: unknown algorithm 'grpoo'; valid: .*grpo"):
        build_config(recipe)
    with pytest.raises(ConfigError, match="grpoo"):  # checked even where the command line names another
        build_config(recipe, ["algorithm=grpo"])


def test_an_experiment_cell_runs_its_method_as_the_preset_defines_it():
    """alprl experiment puts the cell's preset above the recipe: the household recipe's own loss_agg does not
    reach a GRPO cell, while alprl train with that recipe keeps it."""
    from app.experiments.run import cell_config

    recipe = str(CONFIG_DIR / "household_tiny.yaml")
    assert build_config(recipe, ["algorithm=grpo"]).algo.loss_agg == "seq-mean-token-mean"
    assert cell_config(recipe, ["algorithm=grpo"]).algo.loss_agg == "token-mean"


def test_a_missing_or_half_built_warm_start_is_one_line_naming_alprl_sft(tmp_path, capsys):
    argv = ["train", "--config", "configs/demo.yaml", "steps=1", f"output_dir={tmp_path / 'run'}"]
    assert main([*argv, f"sft.output_dir={tmp_path / 'never_built'}"]) == 2
    assert "no warm-start model at" in capsys.readouterr().err
    half = tmp_path / "half_built"  # an `alprl sft` stopped before its model was saved: only its resume folder
    (half / "resume").mkdir(parents=True)
    assert main([*argv, f"sft.output_dir={half}"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"the SFT warm start in {half} is incomplete" in err and "rerun `alprl sft`" in err
    assert len(err.splitlines()) == 1


def test_one_warm_start_serves_every_rl_seed_and_keeps_its_fingerprint(tmp_path):
    import json

    from trainer.sft.cache import META_FILE, check_warm_start, sft_fingerprint

    built = build_config("configs/demo.yaml", [f"sft.output_dir={tmp_path}"])
    (tmp_path / META_FILE).write_text(json.dumps({"fingerprint": sft_fingerprint(built)}))
    for seed in ("seed=1", "seed=7"):  # the RL seed: the same warm start, accepted
        cfg = build_config("configs/demo.yaml", [seed, f"sft.output_dir={tmp_path}"])
        assert sft_fingerprint(cfg) == sft_fingerprint(built)
        check_warm_start(cfg)
    other = build_config("configs/demo.yaml", ["sft.seed=1", f"sft.output_dir={tmp_path}"])
    assert sft_fingerprint(other) != sft_fingerprint(built)  # the warm start's own seed is in its key
    # a start built before the SFT seed had its own key (the alp_acting suite's, committed) keeps its fingerprint
    kept = json.loads((ROOT / "docs/experiments/alp_acting/warm_start" / META_FILE).read_text())
    assert sft_fingerprint(build_config("configs/demo.yaml")) == kept["fingerprint"]
