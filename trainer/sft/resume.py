"""Resume for `alprl sft`: an interrupted warm start continues from its last saved step instead of starting over.

Layout under `<sft.output_dir>/resume/`:
- `prepared.pt` and `tokenizer/`: the tokenized expert episodes, the tokenizer trained on them and what
  sft_meta.json reports of them; written once, before the first optimizer step (the expert data of the WebShop
  recipe alone takes minutes).
- `state.pt`: model, optimizer and schedule states, the step and the losses so far; written every
  `sft.save_every` steps, and when SIGINT or SIGTERM stop the run (at the end of the step in flight).

Each file is written under a temporary name and renamed, so a save cut short never becomes the resume point; one
that does not fit on its disk removes its partial file and raises DiskFullError (trainer/runtime/checkpoint.py). Both
carry the SFT fingerprint: a resume point built for another config is ignored (and replaced). The directory is
removed once the finished model is saved; `alprl sft --force` removes it before starting over.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from trainer.runtime.checkpoint import disk_full_as_error, tensor_bytes

log = logging.getLogger(__name__)

RESUME_DIR = "resume"
PREPARED_FILE = "prepared.pt"
STATE_FILE = "state.pt"


def resume_dir(out: str | Path) -> Path:
    return Path(out) / RESUME_DIR


def clear(out: str | Path) -> None:
    shutil.rmtree(resume_dir(out), ignore_errors=True)


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    kept = (f"the resume point {path} of an earlier step is kept; `alprl sft` continues from it" if path.exists()
            else "no earlier resume point exists")
    with disk_full_as_error(path.parent, f"the SFT resume point {path}", tensor_bytes(obj), kept,
                            lambda: tmp.unlink(missing_ok=True)):
        torch.save(obj, tmp)
        tmp.replace(path)


def _load_matching(path: Path, fingerprint: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    saved = torch.load(path, weights_only=False)
    if saved.get("fingerprint") != fingerprint:
        log.warning("sft: ignoring the resume point %s: it was saved for another config", path)
        return None
    return saved


def save_prepared(out: str | Path, fingerprint: str, tokenizer: PreTrainedTokenizerBase,
                  data: list[tuple[list[int], list[int]]], info: dict[str, Any]) -> None:
    """Store the tokenized expert data (and `info`: expert success, lengths, context) before training starts."""
    root = resume_dir(out)
    clear(out)  # a stale state.pt must not pair with new data
    root.mkdir(parents=True)
    with disk_full_as_error(root, f"the SFT tokenizer {root / 'tokenizer'}", 0, "no earlier resume point exists",
                            lambda: shutil.rmtree(root / "tokenizer", ignore_errors=True)):
        tokenizer.save_pretrained(root / "tokenizer")
    _save_atomic({"fingerprint": fingerprint, "data": data, "info": info}, root / PREPARED_FILE)


def load_prepared(out: str | Path, fingerprint: str
                  ) -> tuple[PreTrainedTokenizerBase, list[tuple[list[int], list[int]]], dict[str, Any]] | None:
    saved = _load_matching(resume_dir(out) / PREPARED_FILE, fingerprint)
    if saved is None:
        return None
    tokenizer = AutoTokenizer.from_pretrained(resume_dir(out) / "tokenizer")
    return tokenizer, saved["data"], saved["info"]


def save_state(out: str | Path, fingerprint: str, step: int, losses: list[float], model: torch.nn.Module,
               optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LRScheduler) -> None:
    _save_atomic({"fingerprint": fingerprint, "step": step, "losses": list(losses), "model": model.state_dict(),
                  "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                  "torch_rng": torch.get_rng_state()}, resume_dir(out) / STATE_FILE)


def saved_step(out: str | Path, fingerprint: str) -> int | None:
    """The step of the matching resume point, None if there is none."""
    saved = _load_matching(resume_dir(out) / STATE_FILE, fingerprint)
    return None if saved is None else saved["step"]


@dataclass(frozen=True)
class ResumeTarget:
    """Where `train_on_sequences` saves and finds its resume point, and how often it saves."""

    out: Path
    fingerprint: str
    save_every: int


def load_state(out: str | Path, fingerprint: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               schedule: torch.optim.lr_scheduler.LRScheduler) -> tuple[int, list[float]]:
    """Restore the saved step into `model`, `optimizer` and `schedule`; (step, losses so far), (0, []) if none."""
    saved = _load_matching(resume_dir(out) / STATE_FILE, fingerprint)
    if saved is None:
        return 0, []
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    schedule.load_state_dict(saved["schedule"])
    torch.set_rng_state(saved["torch_rng"])
    return saved["step"], saved["losses"]


@dataclass
class StopBetweenSteps:
    """While active, SIGINT and SIGTERM ask the training loop to stop after the step in flight (so the saved state
    is a whole step, never a half-applied optimizer update); a second signal acts at once, as without it.

    The loop checks `requested` after each step, saves, then calls `raise_stop()`: KeyboardInterrupt for SIGINT,
    SystemExit(128 + signal) for SIGTERM, the exits the CLI gives without it. A no-op off the main thread, where
    Python cannot install signal handlers.
    """

    requested: int | None = None
    _previous: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> StopBetweenSteps:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._request)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self.requested = signum
        self._restore()
        log.warning("sft: %s received; stopping after this step and saving a resume point (again to stop now)",
                    signal.Signals(signum).name)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def raise_stop(self) -> None:
        if self.requested == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + (self.requested or signal.SIGTERM))
