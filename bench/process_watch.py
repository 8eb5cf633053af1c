"""A benchmarked command and its process tree: launch it, poll the tree's RSS (the command's descendants included:
vLLM's engine processes, grading children) and, for alprl, when each step's record arrives in metrics.jsonl.
Shared by the bench scripts that compare whole runs (bench/trl_peer.py, bench/demo_engine.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.05
TREE_REFRESH_S = 0.25  # finding descendants walks /proc; their RSS is read every poll



@dataclass
class Watched:
    rc: int
    launch: float  # epoch seconds
    exit: float
    peak_bytes: int
    arrivals: dict[int, float]  # alprl: step → when its record appeared in metrics.jsonl (epoch seconds)


def _rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except psutil.Error:  # gone between the listing and now
        return 0


def _descendants(root: psutil.Process, known: list[psutil.Process]) -> list[psutil.Process]:
    try:
        found = [root, *root.children(recursive=True)]
    except psutil.Error:
        return known
    return found + [p for p in known if p not in found]  # keep orphans we saw (reparented engine processes)


def _new_records(path: Path, offset: int, arrivals: dict[int, float], now: float) -> int:
    """Note when each complete step record past byte `offset` of metrics.jsonl arrived; returns the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return offset
    complete = chunk[: chunk.rfind(b"\n") + 1]
    for line in complete.splitlines():
        record = json.loads(line)
        if "perf/step_s" in record:
            arrivals.setdefault(int(record["step"]), now)
    return offset + len(complete)


def _end(tree: list[psutil.Process]) -> None:
    """Terminate what is left of a run's own process tree (a crashed child's engine), then kill the stubborn."""
    for signal in ("terminate", "kill"):
        alive = [p for p in tree if p.is_running()]
        for proc in alive:
            try:
                getattr(proc, signal)()
            except psutil.Error:
                pass
        tree = psutil.wait_procs(alive, timeout=5)[1]


def watch(cmd: list[str], log: Path, timeout_s: float, metrics: Path | None = None) -> Watched:
    """Run `cmd` from the repository root, polling its tree's RSS (and alprl's metrics.jsonl) until it exits."""
    launch = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    root = psutil.Process(proc.pid)
    tree, refreshed, peak, offset, arrivals = [root], 0.0, 0, 0, {}
    while proc.poll() is None:
        now = time.time()
        if now - refreshed >= TREE_REFRESH_S:
            tree, refreshed = _descendants(root, tree), now
        peak = max(peak, sum(map(_rss, tree)))
        if metrics is not None:
            offset = _new_records(metrics, offset, arrivals, now)
        if now - launch > timeout_s:
            with log.open("a") as out:
                out.write(f"\nbench: timed out after {timeout_s:g} s: killed\n")
            _end(tree)
        time.sleep(POLL_S)
    exit_time = time.time()
    rc = proc.wait()
    _end(tree[1:])
    if metrics is not None:
        _new_records(metrics, offset, arrivals, exit_time)
    return Watched(rc, launch, exit_time, peak, arrivals)


def crash_line(log: Path) -> str:
    """The line of a failed run's log that says why: the last error line, else the last line."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"Error|Exception|error:|trl_peer:|bench:|Killed|timed out", ln)]
    return f"crashed: {(errors or lines or ['no output'])[-1][:200]}"
