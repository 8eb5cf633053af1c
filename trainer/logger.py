"""Metric sinks: JSONL (always), TensorBoard (always), Weights & Biases (optional)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricLogger:
    """Writes one JSON object per step to `<run>/metrics.jsonl` and scalars to TensorBoard.

    On resume from step k, records after k are dropped first so the file stays one line per step.
    """

    def __init__(self, run_dir: str | Path, *, resume_step: int | None = None, use_wandb: bool = False,
                 config: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if resume_step is not None:
            self.drop_after(resume_step)
        elif self.path.exists():
            self.path.unlink()
        from torch.utils.tensorboard import SummaryWriter  # heavy import, only when logging

        self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.wandb = None
        if use_wandb:
            try:
                import wandb
            except ImportError as exc:
                raise RuntimeError("wandb=true but wandb is not installed; run `pip install wandb` or set "
                                   "wandb=false") from exc
            self.wandb = wandb.init(project="alprl", dir=str(self.run_dir), config=config or {})

    def drop_after(self, step: int) -> None:
        """Forget the JSONL records of steps after `step` (a resumed run logs them again)."""
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: (v if math.isfinite(v) else None) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in metrics.items():
            if math.isfinite(value):
                self.tb.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def close(self) -> None:
        self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
