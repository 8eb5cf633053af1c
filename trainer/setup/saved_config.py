"""The run config saved with a model (`alprl_config.yaml`, trainer/config/run_config.py), read back for evaluation.

`alprl eval` and `alprl robustness` read it (`load_run_config`) and evaluate the checkpoint through `eval_settings`,
the settings training-time evaluation uses too, so their clean figures are the run's own held-out figures (same env
and task filters, prompt format, stop strings, limits, sampling and seeds). A directory without the file (a plain
Hugging Face model, an older checkpoint) is evaluated with the defaults.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import yaml

from evaluation.evaluate import EvalSettings
from trainer.config.errors import ConfigError
from trainer.config.run_config import RUN_CONFIG_FILE
from trainer.config.train_config import MOVED_KEYS, TrainConfig
from trainer.setup.build import build_config
from trainer.tasks import rollout_limits

DATASET_KEYS = ("dataset", "eval_dataset", "dataset_format", "dataset_split_field", "dataset_fields")  # env.*
TRAIN_ONLY_KEYS = ("dataset", "dataset_split_field")  # the training file, with a separate eval_dataset


def load_run_config(model_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
                    without_datasets: bool = False) -> TrainConfig | None:
    """The run config saved with `model_dir` plus `overrides` (key=value), validated; None if the directory has
    none. Evaluation plays the test split only, so a run that had a separate `env.eval_dataset` is read without its
    training file (which need not be on this machine); `without_datasets` drops every dataset key (`alprl eval`:
    each benchmark brings its own file). A file this version of alprl cannot read raises one ConfigError naming
    it."""
    path = Path(model_dir) / RUN_CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = moved_keys_in_place(yaml.safe_load(path.read_text()) or {})
        env = data.get("env") or {}
        dropped = DATASET_KEYS if without_datasets else TRAIN_ONLY_KEYS if env.get("eval_dataset") else ()
        for key in dropped:
            env.pop(key, None)
        return build_config(data, list(overrides))
    except (ConfigError, yaml.YAMLError, AttributeError) as exc:
        one_line = " ".join(str(exc).split())
        raise ConfigError(f"{path}: {one_line} (the run config saved with this model; pass --no-run-config to "
                          "evaluate it with the defaults instead)") from None


def moved_keys_in_place(data: dict) -> dict:
    """A run config written before a key moved (`MOVED_KEYS`: top-level `wandb` is now `logging.wandb`), with each
    such key where it now lives. The file is alprl's own record of the run, so it reads as it was meant; a recipe or
    override that a user writes with the old key is refused instead (`build_config`)."""
    for old, new in MOVED_KEYS.items():
        *where, leaf = old.split(".")
        node = data
        for part in where:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            value = node.pop(leaf)
            *section, new_leaf = new.split(".")
            target = data
            for part in section:
                target = target.setdefault(part, {})
            target.setdefault(new_leaf, value)
    return data


def eval_settings(cfg: TrainConfig) -> EvalSettings:
    """The held-out evaluation of a run: its env section, rollout limits, eval samples and sampling, seed, and as
    many episodes per engine call as a training step plays (so the per-episode sampling seeds match too)."""
    r = cfg.rollout
    return EvalSettings(env=cfg.env, limits=rollout_limits(cfg), samples_per_task=cfg.eval_samples,
                        greedy=cfg.eval_greedy, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                        seed=cfg.seed,
                        num_envs=r.prompts_per_step * r.group_size)


def run_eval_on_tasks(checkpoint: str | Path, num_tasks: int) -> dict[str, object]:
    """The run's own held-out success on test tasks 0..num_tasks-1 at this checkpoint's step, from
    `<run>/eval/step_<k>.jsonl` (what training-time evaluation wrote), for reports that re-evaluate the checkpoint
    to show beside their own figure; {} when there is no such record (a plain model, a step without evaluation)."""
    path = Path(checkpoint)
    if not (path.name.startswith("step_") and path.parent.name == "checkpoints"):
        return {}
    records_path = path.parent.parent / "eval" / f"{path.name}.jsonl"
    if not records_path.is_file():
        return {}
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    wins = [float(r["won"]) for r in records if r.get("index", num_tasks) < num_tasks]
    if not wins:
        return {}
    return {"run's own held-out success on these tasks": round(statistics.fmean(wins), 4),
            "run's held-out records": str(records_path)}
