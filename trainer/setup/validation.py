"""Config validation: every value a run would trip over later is refused before anything starts.

`validate_config(cfg)` runs at the end of `build_config` (trainer/setup/build.py), so every command (train, sft,
demo, --dry-run) and every caller of `build_config` sees the same rules. It checks the whole tree and raises one
`ConfigError` whose single line joins every violation with "; ", each naming the key, the value and what is allowed.
The rules live by concern beside this module:

- `choices.py`: enumerated values, checked against the registry that consumes them, never a copy of its names;
- `ranges.py`: numeric ranges, those the consumers raise on (or divide by) plus bounds the field docstrings state;
- `rules.py`: cross-field rules (a loss's required aggregation, budgets against contexts, what asynchronous
  rollouts exclude, ...);
- `file_checks.py`: the dataset files a run serves (and, called by the CLI after `build_config`,
  `validate_model_shape`: the checks that need the start model's config.json);
- `source_rules.py`: where a step's trajectories come from; the rules of the `model.lora`, off-policy and
  reasoning-gym sections sit beside their dataclasses in trainer/config/.

`cfg` is a `trainer.config.train_config.TrainConfig`, which raises the same `ConfigError` for keys it cannot read.
"""

from __future__ import annotations

from typing import Any

from trainer.config.algo_config import offpolicy_rules
from trainer.config.errors import ConfigError
from trainer.config.lora_config import lora_rules
from trainer.setup.choices import choice_problems
from trainer.setup.file_checks import dataset_rules
from trainer.setup.ranges import range_problems
from trainer.setup.rules import (
    algo_rules,
    async_rules,
    budget_rules,
    dapo_rules,
    distributed_rules,
    env_rules,
    perturb_rules,
    rejection_rules,
    sampler_rules,
)
from trainer.setup.source_rules import source_rules


def validate_config(cfg: Any) -> None:
    """Raise one `ConfigError` listing every violation in `cfg` (see the module docstring); None if valid."""
    problems = [*choice_problems(cfg), *range_problems(cfg), *env_rules(cfg), *dataset_rules(cfg), *algo_rules(cfg),
                *budget_rules(cfg), *sampler_rules(cfg), *async_rules(cfg), *rejection_rules(cfg),
                *dapo_rules(cfg), *perturb_rules(cfg), *distributed_rules(cfg), *source_rules(cfg),
                *lora_rules(cfg), *offpolicy_rules(cfg)]
    if problems:
        raise ConfigError("; ".join(problems))
