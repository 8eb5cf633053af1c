"""Where an experiment's cells come from, and when its comparisons were declared (`alprl experiment`).

A verdict rests on comparisons declared before the first cell ran, trained from code anyone can check out. Two
records make both checkable:

- **source** (`check_source`): the commit alprl runs from must be reachable from the main branch (`MAIN_BRANCH`)
  with no tracked file changed; otherwise the command is refused in one line before anything starts, unless
  `--exploratory`, which experiment.json records (`exploratory`: why) so that no verdict rests on those cells.
- **declaration** (`declaration`): experiment.json's `declared` block, written before the first cell starts, holds
  the hash of what the report will judge (the suite, its arms, its comparisons and the primary family; more seeds
  of them keep it), the time it was first written and the source commit. A rerun keeps it while the hash holds; a plan whose
  judged part changed after a cell finished is refused (a claim re-declared after seeing results is not declared
  before them); before any cell finished it is declared anew. An experiment begun before these records existed is
  declared at its next run with `after_cells`, the cells that had finished by then.
The report prints both (evaluation/reports/experiment_report.py). Experiments committed before these records have
neither, and their reports are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainer.config.errors import ConfigError
from trainer.runtime.run_meta import PROJECT_ROOT, source_commit

MAIN_BRANCH = "main"
JUDGED_KEYS = ("suite", "arms", "comparisons", "primary")
"""The parts of experiment.json the declaration's hash covers: what the report's verdicts are about. Not the cells:
more seeds of the same comparisons (a suite run again with --seeds 0,1,2 after 0,1) keep the declaration."""


def on_main(commit: str, root: Path = PROJECT_ROOT) -> bool:
    """Whether `commit` is reachable from the main branch of the checkout at `root` (its own `main`, or the
    remote's where a clone has no local one)."""
    for ref in (MAIN_BRANCH, f"origin/{MAIN_BRANCH}"):
        try:
            if subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", commit, ref],
                              capture_output=True, timeout=10).returncode == 0:
                return True
        except (OSError, subprocess.SubprocessError):
            return False
    return False


def check_source(exploratory: bool, source: dict[str, Any] | None = None,
                 root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The `source` record of an experiment ({"commit", "dirty", "on_main"}, plus `exploratory` with why when the
    run is one); raises ConfigError (one line) for a dirty or off-main checkout without `exploratory`. `source`:
    the checkout's, as `trainer.runtime.run_meta.source_commit` reads it (None: not a git checkout)."""
    source = source_commit(root) if source is None else source
    if source is None:
        why = "alprl does not run from a git checkout, so the cells' code cannot be named"
        record: dict[str, Any] = {"commit": None, "dirty": None, "on_main": False}
    else:
        record = {**source, "on_main": on_main(source["commit"], root)}
        problems = [f"tracked files differ from {source['commit'][:7]}"] if source["dirty"] else []
        if not record["on_main"]:
            problems.append(f"commit {source['commit'][:7]} is not on {MAIN_BRANCH}")
        why = "; ".join(problems)
    if not why:
        return record
    if not exploratory:
        raise ConfigError(f"the cells would run from code no one can check out ({why}): commit the change to "
                          f"{MAIN_BRANCH} and run from there, or pass --exploratory (recorded in experiment.json; "
                          "no verdict rests on exploratory cells)")
    return {**record, "exploratory": why}


def judged_hash(described: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of the judged part of experiment.json (`JUDGED_KEYS`)."""
    judged = {k: described.get(k) for k in JUDGED_KEYS}
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:16]


def declaration(described: dict[str, Any], previous: dict[str, Any] | None, source: dict[str, Any],
                cells_finished: int, now: datetime | None = None) -> dict[str, Any]:
    """The `declared` block for experiment.json (module docstring). `previous`: the experiment.json already in the
    output directory (None: none); `cells_finished`: how many of its cells have finished."""
    digest = judged_hash(described)
    before = (previous or {}).get("declared")
    if before and before.get("hash") == digest:
        return before
    if before and cells_finished:
        raise ConfigError(f"the experiment in this --out has {cells_finished} finished cell(s) and its arms, "
                          "comparisons or primary family changed since they ran: a comparison declared after its "
                          "results is not declared before them; keep them as they were (more seeds are fine), or "
                          "start a new experiment in another --out")
    at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    out = {"hash": digest, "at": at, "commit": source.get("commit")}
    # an experiment begun before declarations were recorded: declared now, and saying so
    return out | ({"after_cells": cells_finished} if cells_finished else {})
