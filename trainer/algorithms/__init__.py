"""Algorithm steps that are more than a loss: MIPU screening, QUATRO duals, SPrPO σ allocation, VCPO's step scaling.

trainer/loop.py calls each as a named stage, switched by config fields only, never by the preset's name:

- `algo.quatro_delta > 0`: per-query duals → `batch.quatro_targets` (quatro.py `quatro_targets`, called by
  `prepare_batch`, the one writer of the batch's fields).
- `algo.vcpo_lr_rule` / `algo.advantage=opob`: VCPO's ESS-scaled learning rate, set for each mini-batch's optimizer
  step (trainer/update.py calls vcpo.py `ess_lr_scale` and `scaled_lr`), and its off-policy optimal baseline's
  weights (vcpo.py `sequence_log_weights`, called by the loop's `compute_advantages`).
- `perturb.sprpo_adaptive`: sensitivity probe + σ allocation every `sprpo_every` steps (sprpo.py `Allocator`).
- `algo.mipu_screen`: the update becomes a candidate, screened on validation groups and rolled back (weights,
  optimizer state, engine) when rejected (`learn` → `mipu_screening`; mipu.py `take_snapshot` …
  `screen_candidate`).

Their per-run state is one `AlgorithmState`, saved in the trainer checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.algorithms.mipu import MipuHistory
from trainer.algorithms.sprpo import Allocator

__all__ = ["AlgorithmState"]


@dataclass
class AlgorithmState:
    """Per-run state of the algorithm stages (saved in the trainer checkpoint via `state_dict`)."""

    mipu: MipuHistory = field(default_factory=MipuHistory)
    sprpo: Allocator = field(default_factory=Allocator)

    def state_dict(self) -> dict:
        return {"mipu": self.mipu.state_dict(), "sprpo": self.sprpo.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.mipu.load_state_dict(state.get("mipu", {}))
        self.sprpo.load_state_dict(state.get("sprpo", {}))
