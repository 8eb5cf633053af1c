"""What a run trained on, beside its config: `<run>/run_meta.json`, copied into every checkpoint.

The config names dataset files by path; a path says nothing about the bytes that were there. The metadata records
a fingerprint of each dataset file (`envs.datasets.fingerprint`, sha256 of the bytes) as training started, the
alprl version, the source commit (when alprl runs from a git checkout: the commit and whether tracked files had
edits) and the start time, so a result can be traced to its data and code and an edited file is noticed: a resumed
run whose dataset file changed since the run began says so in one warning (the run goes on: the user may have
fixed a typo on purpose).
"""

from __future__ import annotations

import json
import logging
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from envs.datasets import source_fingerprint, source_location
from trainer.config.train_config import TrainConfig

RUN_META_FILE = "run_meta.json"
PROJECT_ROOT = Path(__file__).resolve().parents[2]

log = logging.getLogger(__name__)


def dataset_fingerprints(cfg: TrainConfig) -> dict[str, dict[str, str]]:
    """{config key: {"path", "sha256_16"}} for each dataset file the config names (none for generated tasks; a
    reasoning-gym source: the source as written and the reasoning-gym version, `envs.datasets.sources`)."""
    files = {"env.dataset": cfg.env.dataset, "env.eval_dataset": cfg.env.eval_dataset}
    return {key: {"path": source_location(path), "sha256_16": source_fingerprint(path)}
            for key, path in files.items() if path}


def _version() -> str:
    try:
        return metadata.version("alprl")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def source_commit(root: str | Path = PROJECT_ROOT) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the git checkout alprl runs from; None outside one (an installed wheel) or without git.

    dirty: tracked files differ from the commit (untracked files, e.g. runs/, do not count)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def start_run_meta(run_dir: str | Path, cfg: TrainConfig, resuming: bool, engine: str) -> dict[str, Any]:
    """Write `<run_dir>/run_meta.json` for a new run and return it (dataset fingerprints, the code, the engine that
    samples); a resumed run keeps the file it started with and warns about each dataset file whose bytes differ
    from what the run began on."""
    path = Path(run_dir) / RUN_META_FILE
    now = dataset_fingerprints(cfg)
    if resuming and path.is_file():
        meta = json.loads(path.read_text())
        for key, then in meta.get("datasets", {}).items():
            if key in now and now[key]["sha256_16"] != then.get("sha256_16"):
                log.warning("%s=%s changed since this run began (fingerprint %s then, %s now); the resumed run "
                            "trains on the file as it is now", key, now[key]["path"], then.get("sha256_16"),
                            now[key]["sha256_16"])
        return meta
    meta = {"datasets": now, "alprl_version": _version(), "source": source_commit(), "engine": engine,
            "started": datetime.now(UTC).isoformat(timespec="seconds")}
    write_run_meta(run_dir, meta)
    return meta


def write_run_meta(directory: str | Path, meta: dict[str, Any]) -> Path:
    path = Path(directory) / RUN_META_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2) + "\n")
    return path


def read_run_meta(directory: str | Path) -> dict[str, Any] | None:
    """The metadata saved in a run or checkpoint directory (None without one: an older run, a plain HF model)."""
    path = Path(directory) / RUN_META_FILE
    return json.loads(path.read_text()) if path.is_file() else None
