"""`alprl robustness` backend: load a checkpoint, sweep perturbations on held-out env tasks, write the report.

Every condition plays the same tasks (`split` indices 0..num_tasks−1) with the same sampling seeds through a
fresh `HFEngine` built on the perturbed copy, so differences between conditions come from the perturbation
(and from the sampling it changes), not from the task draw. The engine runs in fp32 by default so that the
clean condition is the checkpoint itself and weight quantization is not hidden under bf16 rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import envs  # noqa: F401  (registers the alprl/* environments)
from agents.engines.hf import HFEngine
from agents.env_families import env_entry, make_agent
from agents.models import load_model_and_tokenizer
from agents.rollout import RolloutLimits
from evaluation.evaluate import evaluation_records
from evaluation.robustness import DEFAULT_SCALES, Scale, check_families, robustness_sweep
from evaluation.robustness_report import write_robustness_report


@dataclass(frozen=True)
class EnvSpec:
    """What `agents.env_families.make_agent` reads: the env id and the TIR style."""

    id: str
    style: str = "simpletir"


def parse_scale(text: str) -> Scale:
    """'0.5' → 0.5; 'int8', '2:4' stay labels."""
    try:
        return float(text)
    except ValueError:
        return text.strip()


def parse_scales(text: str) -> dict[str, list[Scale]]:
    """'noise=0.1,0.2;quant=int8,int4' → {"noise": [0.1, 0.2], "quant": ["int8", "int4"]} (CLI --scales)."""
    out: dict[str, list[Scale]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        family, sep, values = part.partition("=")
        if not sep or not values.strip():
            raise ValueError(f"--scales {text!r}: expected 'family=v1,v2;family=...', got {part!r}")
        check_families([family])
        out[family.strip()] = [parse_scale(v) for v in values.split(",") if v.strip()]
    return out


def _probe_prompts(env: gym.Env, agent: Any, split: str, n: int) -> list[list[int]]:
    """Prompt token ids of the first n tasks: where the probe KL compares clean and perturbed models."""
    prompts = []
    for i in range(n):
        obs, info = env.reset(seed=i, options={"split": split, "index": i})
        prompts.append(agent.prompt_ids(obs, info))
    return prompts


def run_robustness(checkpoint: str | Path, env_id: str = "alprl/TIRMath-v0",
                   families: Iterable[str] = ("noise", "prune", "quant"),
                   scales: Mapping[str, Sequence[Scale]] | None = None,
                   out_dir: str | Path = "runs/robustness", num_tasks: int = 16, *, samples_per_task: int = 1,
                   greedy: bool = True, split: str = "test",
                   style: str = "simpletir", env_kwargs: Mapping[str, Any] | None = None,
                   limits: RolloutLimits | None = None, dtype: str = "float32", temperature: float = 1.0,
                   top_p: float = 1.0, layers: str | list[int] = "all", seed: int = 0, num_envs: int = 16,
                   num_probes: int = 4, progress: Callable[[str], None] | None = None) -> Path:
    """Evaluate `checkpoint` clean and under each (family, scale); returns `<out_dir>/robustness.html`.

    checkpoint: a directory from `save_pretrained` (or a model in the local HF cache).
    env_id: an env id or alias of the env-family table (`agents/env_families.py`).
    families / scales: see `evaluation.robustness` (scales default to `DEFAULT_SCALES`).
    num_tasks, samples_per_task, greedy, split, seed: the tasks and sampling, identical for every condition.
    style, env_kwargs: TIR style (agent and env) and extra `gym.make` arguments.
    dtype, temperature, top_p: the HF engine's settings; layers: decoder layers to perturb ('all', '0-5').
    num_probes: prompts on which the clean-vs-perturbed KL is measured (0 = skip).
    """
    if num_tasks < 1 or samples_per_task < 1:
        raise ValueError(f"run_robustness: num_tasks={num_tasks} and samples_per_task={samples_per_task} "
                         "must both be >= 1")
    names = check_families(families)
    model, tokenizer = load_model_and_tokenizer(checkpoint)
    env_id = env_entry(env_id).env_id  # an alias (tir, household, ...) names its env
    kwargs = ({"style": style} if env_entry(env_id).styled else {}) | dict(env_kwargs or {})
    agent = make_agent(EnvSpec(env_id, style), tokenizer)
    limits = limits or RolloutLimits()
    n_envs = max(1, min(num_envs, num_tasks * samples_per_task))
    env_list = [gym.make(env_id, **kwargs) for _ in range(n_envs)]
    pool = ThreadPoolExecutor(max_workers=8)

    def run_eval(perturbed) -> list[dict[str, Any]]:
        engine = HFEngine(perturbed, tokenizer, dtype=dtype, temperature=temperature, top_p=top_p)
        return evaluation_records(engine, agent, env_list, split, num_tasks, limits,
                                  samples_per_task=samples_per_task, greedy=greedy, seed=seed, pool=pool)

    try:
        probes = _probe_prompts(env_list[0], agent, split, min(num_probes, num_tasks))
        records = robustness_sweep(model, run_eval, names, scales, layers=layers, seed=seed,
                                   probe_ids=probes, progress=progress)
    finally:
        pool.shutdown()
        for env in env_list:
            env.close()
    grid = {f: [str(s) for s in (dict(scales or {}).get(f) or DEFAULT_SCALES[f])] for f in names}
    meta = {"checkpoint": str(checkpoint), "env": env_id, "split": split, "num_tasks": num_tasks,
            "samples_per_task": samples_per_task, "greedy": greedy, "seed": seed, "engine_dtype": dtype,
            "temperature": temperature, "layers": str(layers), "scales": grid}
    title = f"Robustness of {Path(str(checkpoint)).name}"
    return write_robustness_report(out_dir, records, meta, title=title)
