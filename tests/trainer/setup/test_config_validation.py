"""trainer/setup/validation.py: every bad value is refused by `build_config` / the CLI with one line naming the key,
before any model, engine or env starts; every shipped recipe and every registry entry passes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shipped_configs import data_overrides, shipped_configs

from agents.env_families import env_entry
from app.cli import main
from trainer.config.errors import ConfigError
from trainer.objective.corrections import CORRECTIONS, MIS_SEMANTICS
from trainer.objective.losses import AGG_MODES, POLICY_LOSSES, RATIO_LEVELS, REQUIRED_AGG
from trainer.setup.build import algorithm_presets, build_config
from trainer.setup.file_checks import validate_model_shape
from trainer.setup.ranges import RANGES

ROOT = Path(__file__).resolve().parents[3]

# the acceptance list: each of these used to print the config and exit 0
ACCEPTANCE = [
    (["algo.policy_loss=bogus"], "algo.policy_loss"),
    (["algo.loss_agg=nope"], "algo.loss_agg"),
    (["algo.correction=nope"], "algo.correction"),
    (["rollout.group_size=0"], "rollout.group_size"),
    (["optim.lr=-1"], "optim.lr"),
    (["eval_tasks=100000"], "eval_tasks"),
    (["algorithm=seq_alp", "perturb.layers=0-99"], "perturb.layers"),  # the tiny model SFT builds has 4 layers
]

CHOICES = [  # an enumerated value outside the registry that consumes it
    (["algo.upd_level=tok"], "algo.upd_level"),
    (["algo.corr_level=row"], "algo.corr_level"),
    (["algo.mis_semantics=slime"], "algo.mis_semantics"),
    (["rollout.engine=sglang"], "rollout.engine"),
    (["rollout.schedule=sometimes"], "rollout.schedule"),
    (["rollout.dtype=int3"], "rollout.dtype"),
    (["rollout.engine=hf", "rollout.dtype=auto"], "rollout.dtype"),  # vLLM's auto dtype; transformers has none
    (["rollout.dtype=auto"], "rollout.dtype"),  # engine auto may fall back to transformers
    (["env.id=CartPole-v1"], "env.id"),
    (["env.style=chatty"], "env.style"),
    (["env.task_types=multiply,bogus"], "env.task_types"),
    (["env.id=alprl/Household-v0", "env.task_types=multiply"], "env.task_types"),
    (["env.id=alprl/WebShop-v0", "env.task_types=multiply"], "env.task_types"),  # WebShop has no task types
    (["env.action_projection=closest"], "env.action_projection"),
    (["env.expert_search=dfs"], "env.expert_search"),
    (["perturb.layers=first"], "perturb.layers"),
    (["perturb.layers=5-2"], "perturb.layers"),
    (["rollout.sampler_quant=nf4"], "rollout.sampler_quant"),
    (["rollout.sampler_quant=int9"], "rollout.sampler_quant"),
    (["rollout.sampler_quant=int4-g32"], "rollout.sampler_quant"),  # the group has its own key
]

RANGE_VIOLATIONS = [  # a number outside what its consumer accepts
    (["rollout.group_size=1"], "rollout.group_size"),  # a group of one has no baseline
    (["rollout.prompts_per_step=0"], "rollout.prompts_per_step"),
    (["steps=-1"], "steps"),
    (["save_every=0"], "save_every"),
    (["eval_tasks=501"], "eval_tasks"),
    (["eval_tasks=-1"], "eval_tasks"),
    (["eval_samples=0"], "eval_samples"),
    (["sft.lr=0"], "sft.lr"),
    (["perturb.lr=-1e-3"], "perturb.lr"),
    (["algo.clip_low=1.5"], "algo.clip_low"),
    (["algo.clip_low=0"], "algo.clip_low"),
    (["algo.clip_high=0"], "algo.clip_high"),
    (["algo.clip_dual=1"], "algo.clip_dual"),
    (["algo.corr_upper=0"], "algo.corr_upper"),
    (["algo.corr_lower=-0.5"], "algo.corr_lower"),
    (["algo.corr_lower=low"], "algo.corr_lower"),
    (["rollout.max_new_tokens=0"], "rollout.max_new_tokens"),
    (["rollout.max_response_tokens=0"], "rollout.max_response_tokens"),
    (["rollout.max_obs_tokens=0"], "rollout.max_obs_tokens"),
    (["optim.micro_batch_size=0"], "optim.micro_batch_size"),
    (["optim.num_minibatches=0"], "optim.num_minibatches"),
    (["rollout.temperature=0"], "rollout.temperature"),
    (["rollout.top_p=0"], "rollout.top_p"),
    (["rollout.top_p=1.5"], "rollout.top_p"),
    (["optim.grad_clip=0"], "optim.grad_clip"),
    (["optim.betas=[0.9,1.0]"], "optim.betas"),
    (["perturb.sigma_init=-1e-6"], "perturb.sigma_init"),
    (["rollout.gpu_memory_utilization=0"], "rollout.gpu_memory_utilization"),
    (["rollout.gpu_memory_utilization=1.5"], "rollout.gpu_memory_utilization"),
    (["env.difficulty=7"], "env.difficulty"),
    (["perturb.sprpo_factor=1"], "perturb.sprpo_factor"),
    (["rollout.sampler_quant=int4", "rollout.sampler_quant_group=-1"], "rollout.sampler_quant_group"),
    (["rollout.policy_lag=-1"], "rollout.policy_lag"),
]

CROSS_FIELD = [  # values fine alone, contradictory together
    (["algorithm=gspo", "algo.loss_agg=token-mean"], "algo.loss_agg"),  # REQUIRED_AGG
    (["algo.policy_loss=quatro"], "algo.quatro_delta"),  # the quatro loss needs δ > 0
    (["algorithm=quatro", "algo.quatro_delta=0"], "algo.quatro_delta"),
    (["algo.quatro_lambda_min=10", "algo.quatro_lambda_max=1"], "algo.quatro_lambda_max"),
    (["algorithm=mipu", "rollout.group_size=1"], "rollout.group_size"),  # MIPU's validation groups
    (["algorithm=mipu", "algo.mipu_val_prompts=-1"], "algo.mipu_val_prompts"),
    (["perturb.sprpo_adaptive=true"], "perturb.sprpo_adaptive"),  # no perturbation to allocate
    (["algorithm=sprpo", "perturb.learnable=true"], "perturb.sprpo_adaptive"),  # σ is allocated, not learned
    (["perturb.sigma_init=0"], "perturb.sigma_init"),  # log σ = −inf cannot be learned
    (["algo.corr_upper=5", "algo.corr_lower=5"], "algo.corr_lower"),
    (["algo.mis_semantics=verl", "algo.corr_upper=0.5"], "algo.corr_upper"),  # default lower 1/C = 2 > C
    (["rollout.max_model_len=256", "rollout.max_response_tokens=256"], "rollout.max_response_tokens"),
    (["rollout.prompts_per_step=4", "rollout.group_size=8", "optim.num_minibatches=33"], "optim.num_minibatches"),
    (["rollout.engine=hf", "rollout.schedule=overlapped"], "rollout.schedule"),
    (["env.action_projection=nearest"], "env.action_projection"),  # TIR lists no admissible commands
    (["env.invalid_action_penalty=0.1"], "env.invalid_action_penalty"),
    (["rollout.sampler_quant_group=32"], "rollout.sampler_quant_group"),  # a group of no quantization
    (["algorithm=mipu", "rollout.policy_lag=1"], "rollout.policy_lag"),  # the screen needs the candidate deployed
]


def _dry_run(capsys, *overrides: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["train", "--dry-run", *overrides])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("overrides,key", ACCEPTANCE + CHOICES + RANGE_VIOLATIONS + CROSS_FIELD)
def test_dry_run_refuses_a_bad_value_in_one_line_naming_the_key(capsys, overrides, key):
    code, err = _dry_run(capsys, *overrides)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("alprl train: error: ") and f"{key}=" in err[0], err[0]


def test_every_violation_is_reported_on_the_same_line(capsys):
    code, err = _dry_run(capsys, "algo.policy_loss=bogus", "optim.lr=-1", "env.style=chatty")
    assert code == 2 and len(err) == 1
    assert all(key in err[0] for key in ("algo.policy_loss=", "optim.lr=", "env.style="))


def test_an_unknown_name_lists_the_registry():
    with pytest.raises(ConfigError) as info:
        build_config(None, ["algo.policy_loss=bogus", "algo.loss_agg=nope"])
    message = str(info.value)
    assert all(name in message for name in [*POLICY_LOSSES, *AGG_MODES])


def _with_needs(loss: str) -> list[str]:
    """What a loss needs besides its name (its required aggregation; QUATRO's δ)."""
    out = [f"algo.loss_agg={REQUIRED_AGG[loss]}"] if loss in REQUIRED_AGG else []
    return out + (["algo.quatro_delta=0.02"] if loss == "quatro" else [])


@pytest.mark.parametrize("loss", sorted(POLICY_LOSSES))
def test_every_policy_loss_passes_with_what_it_needs(loss):
    assert build_config(None, [f"algo.policy_loss={loss}", *_with_needs(loss)]).algo.policy_loss == loss


def test_every_aggregation_level_and_correction_passes():
    for agg in AGG_MODES:
        build_config(None, [f"algo.loss_agg={agg}"])
    for level in RATIO_LEVELS:
        build_config(None, [f"algo.upd_level={level}", f"algo.corr_level={level}"])
    for correction in CORRECTIONS:
        for semantics in MIS_SEMANTICS:
            build_config(None, [f"algo.correction={correction}", f"algo.mis_semantics={semantics}"])


@pytest.mark.parametrize("overrides", [
    ["algo.loss_agg=seq-mean-token-sum-norm"],
    ["eval_tasks=500"], ["eval_tasks=0"], ["steps=0"], ["rollout.group_size=2"], ["sft.save_every=0"],
    ["perturb.sigma_init=0", "perturb.learnable=false"],  # σ ≡ 0 exactly: ALP reduces to Bypass
    ["algo.corr_lower=null"], ["algo.mis_semantics=verl", "algo.corr_upper=1"],
    ["rollout.max_model_len=257", "rollout.max_response_tokens=256"],
    ["rollout.prompts_per_step=4", "rollout.group_size=8", "optim.num_minibatches=32"],
    ["rollout.engine=vllm", "rollout.dtype=auto"], ["rollout.engine=hf", "rollout.schedule=turn_by_turn"],
    ["env.id=alprl/Household-v0", "env.action_projection=nearest", "env.invalid_action_penalty=0.1"],
    ["env.id=alprl/ALFWorld-v0", "env.task_types=pick_two_obj_and_place"],
    ["env.task_types=multiply,add", "env.difficulty=0"],
    ["algorithm=seq_alp", "perturb.layers=0-1,3"],
    ["rollout.sampler_quant=int4", "rollout.sampler_quant_group=32"], ["rollout.sampler_quant=fp8"],
    ["rollout.sampler_quant=fp8_e5m2", "rollout.policy_lag=3"], ["rollout.sampler_quant=int2"],
    ["algorithm=mipu", "rollout.sampler_quant=int8"],
])
def test_values_at_the_edge_of_what_is_allowed_pass(capsys, overrides):
    code, err = _dry_run(capsys, *overrides)
    assert code == 0 and err == [], err


def test_every_shipped_config_passes_with_every_preset(tmp_path):
    files = shipped_configs()
    assert files
    for path in [None, *files]:
        data = data_overrides(path, tmp_path) if path else []
        multi_turn = env_entry(build_config(path, data).env.id).multi_turn
        for preset in algorithm_presets():
            if preset == "gigpo" and not multi_turn:  # step-level advantages need steps: refused, one line
                with pytest.raises(ConfigError, match="algo.advantage='gigpo' needs a multi-turn env"):
                    build_config(path, [f"algorithm={preset}", *data])
            else:
                build_config(path, [f"algorithm={preset}", *data])


def test_a_recipe_without_its_dataset_files_is_one_line_naming_them(capsys):
    code, err = _dry_run(capsys, "--config", "configs/tir_qwen2.5_7b.yaml")
    assert code == 2 and len(err) == 1
    assert "env.dataset='data/dapo-math-17k.parquet'" in err[0] and "no such file" in err[0]


def test_every_range_names_a_config_field_and_the_defaults_pass():
    cfg = build_config(None)  # validated: every default is inside its own range
    for key, _, ok in RANGES:
        node = cfg
        for part in key.split("."):
            assert hasattr(node, part), key
            node = getattr(node, part)
        assert ok(node), key


@pytest.mark.parametrize("overrides,key", [ACCEPTANCE[0], ACCEPTANCE[-1]])
def test_the_installed_cli_exits_2_with_one_line(overrides, key):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "train", "--dry-run", *overrides],
                          capture_output=True, text=True, cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"{key}=" in lines[0], proc.stderr
    assert proc.stdout == ""  # nothing printed as if the config were fine


# ---------------------------------------------------------------------------------------------- model shape


SHAPE = {"hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 256}
"""Dimensions a config.json always has; `--dry-run`'s memory plan (trainer/runtime/memory_plan.py) reads them."""


def _model_dir(path: Path, **config) -> Path:
    """A model directory holding only config.json: the shape checks and the memory plan read nothing else."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", **SHAPE, **config}))
    return path


def test_layers_beyond_a_real_model_are_refused_before_it_loads(tiny_model_dir, capsys):
    code, err = _dry_run(capsys, "algorithm=seq_alp", "perturb.layers=0-99", f"model.path={tiny_model_dir}")
    assert code == 2 and len(err) == 1 and "perturb.layers='0-99'" in err[0] and "2 decoder layers" in err[0]
    assert _dry_run(capsys, "algorithm=seq_alp", "perturb.layers=0-1", f"model.path={tiny_model_dir}") == (0, [])
    # a real run stops at the same line: no model load, no engine
    code = main(["train", "--no-progress", "algorithm=seq_alp", "perturb.layers=0-5", f"model.path={tiny_model_dir}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "perturb.layers='0-5'" in err[0], err


def test_layers_are_only_checked_when_the_perturbation_is_on(tmp_path, capsys):
    model = _model_dir(tmp_path / "m", num_hidden_layers=2, max_position_embeddings=4096)
    assert _dry_run(capsys, "perturb.layers=0-5", f"model.path={model}") == (0, [])
    assert _dry_run(capsys, "algorithm=seq_alp", "perturb.logits_only=true", "perturb.layers=0-5",
                    f"model.path={model}") == (0, [])


def test_a_context_shorter_than_the_budget_warns_and_a_longer_max_model_len_is_refused(tmp_path, capsys,
                                                                                       monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    model = _model_dir(tmp_path / "m", num_hidden_layers=2, max_position_embeddings=512)
    code, err = _dry_run(capsys, f"model.path={model}", "rollout.max_response_tokens=600")
    assert code == 0 and len(err) == 1 and "warning" in err[0] and "context (512 tokens" in err[0], err
    code, err = _dry_run(capsys, f"model.path={model}", "rollout.engine=vllm", "rollout.max_model_len=1024")
    assert code == 2 and len(err) == 1 and "rollout.max_model_len=1024" in err[0], err
    # the transformers engine always uses the model's positions; RoPE scaling stretches them for vLLM
    assert _dry_run(capsys, f"model.path={model}", "rollout.engine=hf", "rollout.max_model_len=1024") == (0, [])
    for rope in ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},  # transformers 4
                 {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}}):  # transformers 5
        scaled = _model_dir(tmp_path / "scaled", num_hidden_layers=2, max_position_embeddings=512, **rope)
        assert _dry_run(capsys, f"model.path={scaled}", "rollout.engine=vllm", "rollout.max_model_len=1024") == (0, [])
    plain = _model_dir(tmp_path / "plain", num_hidden_layers=2, max_position_embeddings=512,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})  # as save_pretrained writes
    assert _dry_run(capsys, f"model.path={plain}", "rollout.engine=vllm", "rollout.max_model_len=1024")[0] == 2


def test_without_model_path_the_tiny_model_has_model_num_layers(tmp_path):
    # a warm start `alprl train` accepts was built with the same model.* settings; `alprl sft` builds one
    sft = _model_dir(tmp_path / "sft", num_hidden_layers=2, max_position_embeddings=512)
    cfg = build_config(None, ["algorithm=seq_alp", "perturb.layers=0-3", f"sft.output_dir={sft}"])
    assert validate_model_shape(cfg) == []
    with pytest.raises(ConfigError, match=r"perturb.layers='0-4' selects layers outside the 4 decoder layers "
                                          r"\(0..3\) of the tiny model"):
        validate_model_shape(build_config(None, ["algorithm=seq_alp", "perturb.layers=0-4"]))
    # its context is read from the warm start there: a warning, as the engine start logs it
    (warning,) = validate_model_shape(build_config(None, [f"sft.output_dir={sft}", "rollout.max_response_tokens=600"]))
    assert f"context (512 tokens, from {sft})" in warning


def test_a_model_path_not_there_yet_is_left_to_the_run(tmp_path):
    cfg = build_config(None, ["algorithm=seq_alp", "perturb.layers=0-99", f"model.path={tmp_path / 'missing'}"])
    assert validate_model_shape(cfg) == []  # loading it reports the missing directory


def test_robustness_reports_a_config_error_in_one_line(monkeypatch, capsys):
    import evaluation.robustness_run as robustness_cli

    def refuse(*args, **kwargs):
        raise ConfigError("perturb.layers='0-99' selects layers outside the 2 decoder layers")

    monkeypatch.setattr(robustness_cli, "run_robustness", refuse)
    assert main(["robustness", "--checkpoint", "nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["alprl robustness: error: perturb.layers='0-99' selects layers outside the 2 decoder layers"]


def test_yaml_booleans_in_a_string_key_read_as_on_and_off():
    # YAML 1.1 reads `off` as false: distributed.fsdp=off on the command line must mean "off", not "False"
    from trainer.setup.build import build_config

    assert build_config(None, ["distributed.fsdp=off"]).distributed.fsdp == "off"
    assert build_config(None, ["distributed.fsdp=on"]).distributed.fsdp == "on"
