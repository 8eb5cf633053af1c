"""The `env.reasoning_gym` section (how `env.dataset=reasoning_gym:<name>,...` is drawn) and the rules that check
it.

The defaults are `envs.datasets.reasoning_gym`'s, which a Gymnasium user of the envs gets too; the section only
names them as config keys. `reasoning_gym_rules` is called by `trainer.setup.file_checks`'s dataset rules, so an unknown
dataset name, a config key its reasoning-gym config class lacks or an out-of-range size is one line naming the key
before anything starts; a value that class's own `validate()` refuses comes out of the split's generation, which
validation runs too (`agents.env_families.problem_count`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.datasets import reasoning_gym as rg


@dataclass
class ReasoningGymConfig:
    size: int = rg.DEFAULT_SIZE
    """Train problems per reasoning-gym dataset of env.dataset=reasoning_gym:<name>,... (a dataset's own
    env.reasoning_gym.config.<name>.size replaces it for that dataset)."""
    eval_size: int = rg.DEFAULT_EVAL_SIZE
    """Held-out problems per dataset: the test split (eval_tasks; `alprl eval --bench rg:<name>`), drawn from other
    seeds than train and never a train question."""
    seed: int = rg.DEFAULT_SEED
    """Which problems are drawn; not the run's `seed`, so runs of several seeds train and evaluate on the same
    problems. Train, test and valid draw from disjoint seed ranges it picks."""
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per dataset, keyword arguments of its reasoning-gym config class, e.g.
    env.reasoning_gym.config.basic_arithmetic.max_terms=4 (its seed is refused: the split seeds come from
    env.reasoning_gym.seed)."""


def reasoning_gym_rules(env: Any) -> list[str]:
    """What is wrong with the reasoning-gym sources and options of a config's `env` section, one entry each. The
    config's dataset names and keys are checked only where a source uses reasoning-gym, so a run config carried to
    a machine without the package still evaluates on files."""
    sources = [key for key in ("dataset", "eval_dataset") if rg.is_spec(getattr(env, key))]
    options = rg.RGOptions(**vars(env.reasoning_gym))
    out = [f"env.{problem}" for problem in options.problems()]
    if not sources:
        return out
    for key in sources:
        try:
            rg.parse_spec(getattr(env, key))
        except rg.ReasoningGymError as exc:
            out.append(f"env.{key}={getattr(env, key)!r}: {exc}")
    if not out:
        out += [f"env.{problem}" for problem in options.config_problems()]
    if env.dataset_split_field and rg.is_spec(env.dataset):
        out.append(f"env.dataset_split_field={env.dataset_split_field!r} splits a file; "
                   f"env.dataset={env.dataset!r} draws its splits itself")
    if not any(getattr(env, key) and key not in sources for key in ("dataset", "eval_dataset")):
        out += [f"env.{key}={getattr(env, key)!r} applies to dataset files, and every source here is "
                "reasoning-gym's" for key in ("dataset_format", "dataset_fields") if getattr(env, key)]
    return out
