"""A process that reaches the sandbox over HTTP never loads the executor (zygotes, seccomp, workers): importing the
client or the envs, and building a TIR env given a server URL, load only the client. Each check runs in a fresh
interpreter, since this test process may have imported the executor already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXECUTOR_MODULES = ("sandbox.execution.pool", "sandbox.execution.zygote", "sandbox.isolation.seccomp",
                    "sandbox.execution.zygote_handle")
CHECK = ("import sys\n{setup}\nloaded = [m for m in {modules!r} if m in sys.modules]\n"
         "assert not loaded, f'loaded {{loaded}}'\n")


def run_fresh(setup: str) -> subprocess.CompletedProcess:
    code = CHECK.format(setup=setup, modules=EXECUTOR_MODULES)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("setup", [
    "import sandbox.client",
    "import envs",
    "import envs.tir.env",
    # the env's own runner: the HTTP client, since a URL is given (the port refuses; nothing runs here)
    "import gymnasium as gym, envs\ngym.make('alprl/TIRMath-v0', sandbox_url='http://127.0.0.1:1').close()",
])
def test_http_only_paths_do_not_load_the_executor(setup):
    done = run_fresh(setup)
    assert done.returncode == 0, done.stderr


def test_the_in_process_runner_still_loads_it():
    # the check above would pass vacuously if the module names were wrong
    done = run_fresh("from sandbox.client import make_runner\nmake_runner(None)")
    assert done.returncode != 0 and "sandbox.execution.pool" in done.stderr
