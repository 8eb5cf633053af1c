"""`alprl robustness` backend: load a checkpoint, sweep perturbations on held-out env tasks, write the report.

Every condition plays the same tasks (`split` indices 0..num_tasks−1) with the same sampling seeds through a
fresh `HFEngine` built on the perturbed copy, so differences between conditions come from the perturbation
(and from the sampling it changes), not from the task draw. The engine runs in fp32 by default so that the
clean condition is the checkpoint itself and weight quantization is not hidden under bf16 rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.engines.hf import HFEngine
from agents.env_families import env_entry
from agents.models import load_model_and_tokenizer
from evaluation.evaluate import EvalSettings, evaluation_records
from evaluation.reports.robustness_report import write_robustness_report
from evaluation.robustness import DEFAULT_SCALES, Scale, check_families, robustness_sweep


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


def run_robustness(checkpoint: str | Path, settings: EvalSettings,
                   families: Iterable[str] = ("noise", "prune", "quant"),
                   scales: Mapping[str, Sequence[Scale]] | None = None,
                   out_dir: str | Path = "runs/robustness", num_tasks: int = 16, *, split: str = "test",
                   dtype: str = "float32", layers: str | list[int] = "all", num_probes: int = 4,
                   meta: Mapping[str, Any] | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Evaluate `checkpoint` clean and under each (family, scale); returns `<out_dir>/robustness.html`.

    checkpoint: a directory from `save_pretrained` (or a model in the local HF cache).
    settings: env, limits, samples, sampling and seed, identical for every condition (`trainer.setup.saved_config.
        eval_settings` gives a run's own; the tasks are `split` indices 0..num_tasks-1).
    families / scales: see `evaluation.robustness` (scales default to `DEFAULT_SCALES`).
    dtype: the HF engine's dtype; layers: decoder layers to perturb ('all', '0-5').
    num_probes: prompts on which the clean-vs-perturbed KL is measured (0 = skip).
    meta: more facts for the report (where the settings came from).
    progress: gets a line naming the sweep, then one line as each condition finishes.
    """
    if num_tasks < 1 or settings.samples_per_task < 1:
        raise ValueError(f"run_robustness: num_tasks={num_tasks} and samples_per_task={settings.samples_per_task} "
                         "must both be >= 1")
    names = check_families(families)
    grid = {f: [str(s) for s in (dict(scales or {}).get(f) or DEFAULT_SCALES[f])] for f in names}
    model, tokenizer = load_model_and_tokenizer(checkpoint)
    agent = settings.make_agent(tokenizer)
    env_list = settings.make_envs(num_tasks * settings.samples_per_task)
    if progress:  # once what can fail on bad input has not
        progress(f"robustness of {checkpoint}: {1 + sum(map(len, grid.values()))} conditions (clean first), each "
                 f"on the same {num_tasks} tasks × {settings.samples_per_task} "
                 f"sample{'s' if settings.samples_per_task != 1 else ''}")
    pool = ThreadPoolExecutor(max_workers=8)

    def run_eval(perturbed) -> list[dict[str, Any]]:
        engine = HFEngine(perturbed, tokenizer, dtype=dtype, temperature=settings.temperature, top_p=settings.top_p,
                          top_k=settings.top_k)
        return evaluation_records(engine, agent, env_list, split, num_tasks, settings.limits,
                                  samples_per_task=settings.samples_per_task, greedy=settings.greedy,
                                  seed=settings.seed, pool=pool)

    try:
        probes = _probe_prompts(env_list[0], agent, split, min(num_probes, num_tasks))
        records = robustness_sweep(model, run_eval, names, scales, layers=layers, seed=settings.seed,
                                   probe_ids=probes, progress=progress)
    finally:
        pool.shutdown()
        for env in env_list:
            env.close()
    meta = {"checkpoint": str(checkpoint), "env": env_entry(settings.env.id).env_id, "split": split,
            "num_tasks": num_tasks, "samples_per_task": settings.samples_per_task, "greedy": settings.greedy,
            "seed": settings.seed, "engine_dtype": dtype, "temperature": settings.temperature,
            "layers": str(layers), "scales": grid, **dict(meta or {})}
    title = f"Robustness of {Path(str(checkpoint)).name}"
    return write_robustness_report(out_dir, records, meta, title=title)
