"""The baselines and CPU accounting of bench/sandbox_throughput.py: the naive one-interpreter-per-run baseline (a plain
interpreter: `python -I -S`, or a venv without editable installs, whose finder would add ~16 ms to every start) and
server-side CPU per execution from /proc (a server, its live children and the processes it reaped).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Program:
    name: str
    code: str
    expected: str

    @property
    def body(self) -> bytes:
        return json.dumps({"code": self.code, "language": "python", "run_timeout": RUN_TIMEOUT_S}).encode()


# generous: a loaded machine must not turn slow answers into failures (a failure is counted and printed)
RUN_TIMEOUT_S = 30


PROGRAMS = {
    "print": Program("print(6 * 7)", "print(6 * 7)", "42\n"),
    # imports numpy, builds a small matrix, multiplies it: sum of squares of 0..11 = 506
    "numpy": Program("numpy", "import numpy as np\na = np.arange(12.0).reshape(3, 4)\nprint(int((a @ a.T).trace()))\n",
                     "506\n"),
}
# ---------------------------------------------------------------------------------------------- naive baseline

def base_python() -> str:
    """The interpreter this venv was made from (same version, no venv, no editable finder)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def make_plain_venv(root: str) -> str:
    """A venv without pip and without editable installs; a plain .pth appends numpy's directory (no finder)."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = os.path.join(root, "bin", "python")
    site_dir = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    spec = importlib.util.find_spec("numpy")
    if spec is not None and spec.submodule_search_locations:
        numpy_parent = str(Path(list(spec.submodule_search_locations)[0]).parent)
        Path(site_dir, "numpy-dir.pth").write_text(numpy_parent + "\n")
    return python


def start_ms(cmd: list[str], n: int) -> float:
    """Median wall time of `n` sequential starts of `cmd + ["-c", "pass"]`."""
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([*cmd, "-c", "pass"], capture_output=True, check=True)
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def choose_naive(programs: list[Program], plain_venv: str, trials: int = 10) -> tuple[dict, list[str]]:
    """For each program the faster plain interpreter that runs it correctly, and the lines that say so."""
    candidates = {"python -I -S (base interpreter, isolated, no site)": [base_python(), "-I", "-S"],
                  "plain venv without editable installs": [plain_venv]}
    times = {k: [] for k in [*candidates, "project venv (not used: editable finder)"]}
    for _ in range(trials):  # alternate, so drifting load hits every candidate alike
        for k, cmd in candidates.items():
            times[k].append(start_ms(cmd, 1))
        times["project venv (not used: editable finder)"].append(start_ms([sys.executable], 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [f"naive interpreter start (median of {trials}, `-c pass`): "
             + "; ".join(f"{k} {v:.1f} ms" for k, v in med.items())]
    chosen = {}
    for prog in programs:
        usable = [k for k, cmd in candidates.items()
                  if subprocess.run([*cmd, "-c", prog.code], capture_output=True, text=True).stdout == prog.expected]
        if not usable:
            raise SystemExit(f"no plain interpreter runs the {prog.name} program (numpy missing?)")
        pick = min(usable, key=med.get)
        chosen[prog.name] = candidates[pick]
        lines.append(f"naive baseline for {prog.name}: {pick} (the faster one that runs it): "
                     f"{' '.join(candidates[pick])} -c ...")
    return chosen, lines


def naive_throughput(cmd: list[str], prog: Program, n: int, concurrency: int) -> float:
    def one(_):
        out = subprocess.run([*cmd, "-c", prog.code], capture_output=True, text=True, timeout=60)
        if out.stdout != prog.expected:
            raise RuntimeError(f"naive {prog.name}: {out.stdout!r} {out.stderr[-300:]!r}")

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------- CPU per execution

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def cpu_snapshot(root: int) -> dict[int, tuple[float, float]]:
    """pid → (own CPU s, CPU s of its reaped children) for `root` and every live descendant (/proc, any uid as
    root; a process the caller may not read is left out)."""
    snap = {}
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        utime, stime, cutime, cstime = (int(x) / CLK_TCK for x in fields[11:15])
        snap[pid] = (utime + stime, cutime + cstime)
    return snap


def cpu_delta(root: int, before: dict, after: dict) -> tuple[float, float, float]:
    """(server process, live descendants, reaped processes) CPU seconds between two snapshots. For alprl: the
    server, its zygotes, its runs (reaped by the zygotes); for a SandboxFusion server: the server, -, its runs."""
    server = live = reaped = 0.0
    for pid, (own, children) in after.items():
        own0, children0 = before.get(pid, (0.0, 0.0))
        if pid == root:
            server += own - own0
        else:
            live += own - own0
        reaped += children - children0
    return server, live, reaped


# ---------------------------------------------------------------------------------------------- report
