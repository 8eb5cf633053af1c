"""trainer/runtime/memory_plan.py and trainer/runtime/model_shape.py: the per-GPU memory plan `alprl train --dry-run` prints and
checks, on the shipped recipes (real configs; their dataset files replaced by stand-ins)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shipped_configs import data_overrides

from app.cli import PLAN_SEPARATOR, main
from trainer.config.errors import ConfigError
from trainer.runtime.memory_plan import GIB, format_plan, plan_memory
from trainer.runtime.model_shape import KNOWN_SHAPES, ModelShape, model_shape
from trainer.setup.build import build_config

ROOT = Path(__file__).resolve().parents[3]
TIR_7B = ROOT / "configs/tir_qwen2.5_7b.yaml"
MATH_15B = ROOT / "configs/math_qwen2.5_math_1.5b.yaml"


def _recipe(path: Path, tmp_path: Path, *overrides: str):
    return build_config(path, [*data_overrides(path, tmp_path), *overrides])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "train", "--dry-run", *args],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("hub_id,expected,tolerance", [
    ("Qwen/Qwen2.5-7B", 7.62e9, 0.01),  # the model card's 7.61 B
    ("Qwen/Qwen2.5-Math-1.5B", 1.54e9, 0.02),  # 1.54 B
])
def test_builtin_shapes_count_the_published_parameters(hub_id, expected, tolerance):
    params = ModelShape(name=hub_id, **KNOWN_SHAPES[hub_id]).params()
    assert abs(params - expected) / expected < tolerance, params


def test_the_shape_of_a_local_model_counts_its_parameters(tiny_model_dir):
    from agents.models import load_model_and_tokenizer

    shape = model_shape(build_config(None, [f"model.path={tiny_model_dir}"]))
    model = load_model_and_tokenizer(str(tiny_model_dir))[0]
    assert shape.source.endswith("config.json")
    assert shape.params() == sum(p.numel() for p in model.parameters())  # tied: the head is the embedding


def test_the_7b_recipe_fits_eight_80gb_gpus_and_not_one(tmp_path):
    plan = plan_memory(_recipe(TIR_7B, tmp_path))
    assert plan.world == 8 and plan.fsdp and plan.precision == "bf16"
    assert plan.total <= 80 * GIB and plan.fits is True
    assert plan_memory(_recipe(TIR_7B, tmp_path, "distributed.world_size=1")).fits is False


def test_the_15b_recipe_fits_one_80gb_gpu(tmp_path):
    plan = plan_memory(_recipe(MATH_15B, tmp_path))
    assert plan.world == 1 and plan.fits is True
    assert any(r.name.startswith("reference model") for r in plan.rows)  # its KL term keeps the start model


@pytest.mark.parametrize("world", [2, 4, 8])
def test_sharded_rows_scale_as_one_over_the_world(tmp_path, world):
    def rows(n: int) -> dict[str, int]:
        plan = plan_memory(_recipe(TIR_7B, tmp_path, f"distributed.world_size={n}", "algo.kl_coef=0.001"))
        return {r.name: r.update for r in plan.rows}

    one, many = rows(1), rows(world)  # bf16 under auto plans FSDP on one process too: same row names
    for name in ("master parameters fp32", "gradients fp32", "AdamW moments fp32", "reference model bf16"):
        assert abs(many[name] * world - one[name]) <= world, name  # integer division rounds each shard down
    for name in ("activations (micro-batch)", "logits (micro-batch)", "FSDP all-gathered copy"):
        assert many[name] == one[name], name  # each rank runs its own micro-batch and gathers whole layers


def test_the_plan_names_its_settings_and_the_verdict(tmp_path):
    text = format_plan(plan_memory(_recipe(TIR_7B, tmp_path)))
    head, last = text.splitlines()[0], text.splitlines()[-1]
    assert all(s in head for s in ("Qwen/Qwen2.5-7B", "world 8", "bf16", "micro-batch 2"))
    assert "fits in 80.00 GiB" in last and "does not" not in last


def test_dry_run_refuses_the_7b_recipe_on_one_gpu_in_one_line(tmp_path):
    proc = _cli("--config", str(TIR_7B), *data_overrides(TIR_7B, tmp_path), "distributed.world_size=1")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("alprl train: error: memory plan: ") and "on 1 × 80.00 GiB does not fit" in lines[0]
    assert "distributed.world_size" in lines[0]  # the way out
    assert "does not fit in 80.00 GiB" in proc.stdout  # the plan itself was printed


def test_dry_run_prints_the_demo_plan_unchecked_after_parseable_json():
    proc = _cli("--config", "configs/demo.yaml")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    config, plan = proc.stdout.split(PLAN_SEPARATOR + "\n")
    assert json.loads(config)["output_dir"] == "runs/demo"
    assert "tiny model (model.*)" in plan and "not checked" in plan.splitlines()[-1]


def test_an_unknown_shape_is_one_line_before_anything_is_printed(capsys):
    with pytest.raises(ConfigError, match="local model directory"):
        plan_memory(build_config(None, ["model.path=nobody/Unknown-7B"]))
    capsys.readouterr()
    assert main(["train", "--dry-run", "model.path=nobody/Unknown-7B"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "model.path='nobody/Unknown-7B'" in err


def test_without_cuda_a_plan_over_the_host_memory_is_one_warning(qwen_base_dir):
    """A 151,936-token vocabulary at the demo's micro-batch of 64: ~36 GiB of logits alone on a 24 GiB machine."""
    from trainer.runtime.memory_plan import host_memory_warning

    real = build_config(ROOT / "configs/demo.yaml", [f"model.path={qwen_base_dir}", "optim.micro_batch_size=64"])
    warning = host_memory_warning(real, host_bytes=24 * GIB)
    assert warning is not None and warning.count("\n") == 0
    assert "of host memory" in warning and "largest: logits (micro-batch)" in warning
    assert "this machine has 24.00 GiB" in warning and "optim.micro_batch_size" in warning
    assert host_memory_warning(build_config(ROOT / "configs/demo.yaml", []), host_bytes=24 * GIB) is None
    # the real machine's memory: a micro-batch no host holds is printed by --dry-run on stderr
    done = _cli("--config", "configs/demo.yaml", f"model.path={qwen_base_dir}", "optim.micro_batch_size=100000")
    assert done.returncode == 0, done.stderr
    assert "alprl train: warning: memory plan: this run needs about" in done.stderr
