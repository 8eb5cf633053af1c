"""Metric sinks: JSONL (always), TensorBoard (always), Weights & Biases and Trackio (optional, the `logging` section).

Every sink gets the same metrics each step, unchanged (a non-finite value goes to W&B and Trackio as they store it,
where metrics.jsonl writes null and TensorBoard skips it), so they agree step for step. Trackio also gets a table of a
few episodes on the steps the loop asks (`MetricLogger.log_episodes`); the loop builds it
(trainer/diagnostics/episode_table.py), so that the sinks only store what they are given. The
optional packages are imported only when switched on; `require_logger_packages` refuses a missing one before the
run starts.

Trackio (Hugging Face's local-first tracker) keeps a project's runs in one SQLite file under $TRACKIO_DIR (default
~/.cache/huggingface/trackio; its own TRACKIO_SPACE_ID / TRACKIO_SERVER_URL apply as usual). Departures from a plain
`trackio.init`: its CPU/GPU system-metric threads are off (the run's `perf/*` metrics give time and peak memory); a
resumed run (`--resume`) is a new Trackio run from the checkpoint's step + 1, as it is a new W&B run, since neither
can drop the steps after the checkpoint the way metrics.jsonl does.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import shutil
import threading
from pathlib import Path
from typing import Any

from trainer.config.errors import ConfigError
from trainer.runtime.checkpoint import DiskFullError, is_disk_full, latest_checkpoint

log = logging.getLogger(__name__)


class MetricLogger:
    """Writes one JSON object per step to `<run>/metrics.jsonl` and scalars to TensorBoard, and with `use_wandb` /
    `use_trackio` the same metrics to W&B / Trackio under `project` (with the run's `config`).

    On resume from step k, records after k are dropped first so the file stays one line per step.
    """

    def __init__(self, run_dir: str | Path, *, resume_step: int | None = None, use_wandb: bool = False,
                 use_trackio: bool = False, project: str = "alprl", config: dict[str, Any] | None = None):
        require_logger_packages(wandb=use_wandb, trackio=use_trackio)  # before any file is touched
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if resume_step is not None:
            self.drop_after(resume_step)
        elif self.path.exists():
            self.path.unlink()
        from torch.utils.tensorboard import SummaryWriter  # heavy import, only when logging

        self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        _quiet_tensorboard_disk_full()
        self.wandb = None
        if use_wandb:
            import wandb

            self.wandb = wandb.init(project=project, dir=str(self.run_dir), config=config or {})
        self.trackio = None
        if use_trackio:
            self.trackio = TrackioSink(project, config or {})

    def drop_after(self, step: int) -> None:
        """Forget the JSONL records of steps after `step` (a resumed run logs them again)."""
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: (v if math.isfinite(v) else None) for k, v in metrics.items()}}
        line = json.dumps(record) + "\n"
        try:
            with self.path.open("a") as f:
                f.write(line)
            for key, value in metrics.items():  # TensorBoard's writer thread re-raises its write errors here
                if math.isfinite(value):
                    self.tb.add_scalar(key, value, step)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self._cut_to_whole_lines()
            raise self._disk_full(step) from exc
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)
        if self.trackio is not None:
            self.trackio.log(step, metrics)

    @property
    def keeps_episodes(self) -> bool:
        """Whether a sink stores tables of episodes (Trackio), so that the caller decodes them only then."""
        return self.trackio is not None

    def log_episodes(self, step: int, columns: list[str], rows: list[list[Any]]) -> None:
        """Trackio's table of a few of the step's episodes (`columns`, one row per episode); nothing without
        Trackio."""
        if self.trackio is not None:
            self.trackio.log_episodes(step, columns, rows)

    def _cut_to_whole_lines(self) -> None:
        """Drop a partly written last record (a full disk can cut a write), so the file stays one JSON per line."""
        data = self.path.read_bytes() if self.path.exists() else b""
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)

    def _disk_full(self, step: int) -> DiskFullError:
        """The one-line error of a metrics record that did not fit on the disk, with how to continue."""
        latest = latest_checkpoint(self.run_dir)
        resume = (f"after freeing space, --resume continues from {latest} and logs the later steps again" if latest
                  else "no checkpoint was saved yet, so the run starts over")
        free = shutil.disk_usage(self.run_dir).free
        return DiskFullError(f"cannot write the metrics of step {step} to {self.path}: the disk is full "
                                    f"({free / 2**20:.1f} MB free); free space or set output_dir=<a directory on a "
                                    f"larger disk>; {resume}")

    def close(self) -> None:
        try:
            self.tb.close()
        except OSError as exc:  # the run is ending (often because of this full disk): metrics.jsonl has every record
            if not is_disk_full(exc):
                raise
            log.warning("TensorBoard events in %s are cut short: the disk is full", self.run_dir / "tensorboard")
        if self.wandb is not None:
            self.wandb.finish()
        if self.trackio is not None:
            self.trackio.close()


def require_logger_packages(**enabled: bool) -> None:
    """Raise a one-line `ConfigError` for a switched-on optional logger (`wandb=True`, `trackio=True`: the package,
    the pyproject extra and the `logging.<name>` key share the name) that is not installed, naming the install and
    the key that turns it off. Called before the run starts (trainer/loop.py `train`) and by `MetricLogger`."""
    for name, on in enabled.items():
        if on and importlib.util.find_spec(name) is None:
            raise ConfigError(f"logging.{name}=true but {name} is not installed: pip install -e '.[{name}]' (or "
                              f"pip install {name}), or set logging.{name}=false")


class TrackioSink:
    """One Trackio run of `project` with the run's `config` (imports trackio: built only with `logging.trackio`)."""

    TABLE_KEY = "rollout/episodes"

    def __init__(self, project: str, config: dict[str, Any]):
        import trackio

        self._trackio = trackio
        self.run = trackio.init(project=project, config=config, embed=False, auto_log_cpu=False,
                                auto_log_gpu=False)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def log_episodes(self, step: int, columns: list[str], rows: list[list[Any]]) -> None:
        """`TABLE_KEY` at `step`: a `trackio.Table` of `rows` (nothing for an empty batch)."""
        if rows:
            self.run.log({self.TABLE_KEY: self._trackio.Table(columns=columns, data=rows)}, step=step)

    def close(self) -> None:
        """Flush and finish the run, through `trackio.finish` where the run is trackio's current one (started on this
        thread), so that trackio's exit hook does not finish it a second time."""
        try:
            self._trackio.finish()
        except RuntimeError:  # closed on another thread, which does not see trackio's current run
            self.run.finish()


def _quiet_tensorboard_disk_full() -> None:
    """Keep a full disk in TensorBoard's writer thread from printing a traceback beside the run's one-line error.

    The writer thread stores its write error for the next add_scalar/close (which `MetricLogger` turns into
    DiskFullError or a warning) and then re-raises it, so `threading.excepthook` would print it a second time.
    Every other thread exception, and every other error of that thread, still reaches the hook in place.
    """
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard_disk_full", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        from_tensorboard = type(args.thread).__module__.startswith("tensorboard.")
        if not (from_tensorboard and is_disk_full(args.exc_value)):
            previous(args)

    hook.quiets_tensorboard_disk_full = True
    threading.excepthook = hook


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
