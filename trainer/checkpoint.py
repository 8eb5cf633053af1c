"""The only writer of checkpoints.

Layout: `<run>/checkpoints/step_<k>/` holds a Hugging Face model directory (safetensors weights, config,
generation config, tokenizer: loadable by transformers and vLLM) plus `trainer_state.pt` (optimizer state,
step, RNG states) for `--resume`. `<run>/checkpoints/latest` names the newest complete checkpoint; it is
written last, so an interrupted save never becomes the resume point.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.models import save_pretrained

STATE_FILE = "trainer_state.pt"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    optimizer: torch.optim.Optimizer, extra: dict[str, Any] | None = None, keep: int = 3) -> Path:
    """Write step `step` atomically (tmp dir + rename), update `latest`, keep the newest `keep`."""
    root = checkpoint_dir(run_dir)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tokenizer, tmp)
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "rng": _rng_state(), "extra": extra or {}},
               tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (root / "latest").write_text(final.name + "\n")
    steps = sorted((p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1]))
    for old in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    marker = checkpoint_dir(run_dir) / "latest"
    if not marker.exists():
        return None
    path = checkpoint_dir(run_dir) / marker.read_text().strip()
    return path if (path / STATE_FILE).exists() else None


def load_trainer_state(path: str | Path, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore optimizer and RNG states from a checkpoint dir; returns the saved state dict."""
    state = torch.load(Path(path) / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    return state


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
