"""Algorithm steps that are more than a loss: MIPU accept/rollback, QUATRO duals, SPrPO σ allocation.

`AlgorithmHooks` is the loop's single entry point; each hook is switched by config fields only, never
by the preset's name, and is a no-op when its fields are off:

    metrics |= c.hooks.before_update(c, cfg, batch, step)   # after old log-probs and corrections
    metrics |= c.hooks.update_and_sync(c, cfg, step, lambda: update(c, cfg, batch, step))

- `algo.quatro_delta > 0`: per-query duals, advantages → trust-region target log-ratios (quatro.py).
- `perturb.sprpo_adaptive`: sensitivity probe + σ allocation every `sprpo_every` steps (sprpo.py).
- `algo.mipu_screen`: the update becomes a candidate, screened on validation groups and rolled back
  (weights, optimizer state, engine) when rejected (mipu.py). Without it: update, then sync the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainer.algorithms.mipu import MipuScreen
from trainer.algorithms.quatro import prepare_duals
from trainer.algorithms.sprpo import Allocator
from trainer.config import TrainConfig
from trainer.types import Batch

if TYPE_CHECKING:
    from trainer.components import Components

__all__ = ["AlgorithmHooks"]


@dataclass
class AlgorithmHooks:
    """Per-run state of the algorithm steps (saved in the trainer checkpoint via `state_dict`)."""

    mipu: MipuScreen = field(default_factory=MipuScreen)
    sprpo: Allocator = field(default_factory=Allocator)

    def before_update(self, c: Components, cfg: TrainConfig, batch: Batch, step: int) -> dict[str, float]:
        """Once per rollout batch, before the mini-batch updates (needs `batch.old_logp`)."""
        metrics = prepare_duals(cfg.algo, batch)
        metrics |= self.sprpo.maybe_allocate(c.model, c.perturbation, batch, cfg, step)
        return metrics

    def update_and_sync(self, c: Components, cfg: TrainConfig, step: int,
                        run_update: Callable[[], dict[str, float]]) -> dict[str, float]:
        """The update stage followed by the engine sync, screened by MIPU when `algo.mipu_screen`."""
        return self.mipu.screened_update(c, cfg, step, run_update)

    def state_dict(self) -> dict:
        return {"mipu": self.mipu.state_dict(), "sprpo": self.sprpo.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.mipu.load_state_dict(state.get("mipu", {}))
        self.sprpo.load_state_dict(state.get("sprpo", {}))
