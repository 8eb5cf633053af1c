"""`alprl sft` resumes: an interrupted warm start continues from its resume point and ends with the weights, losses
and log of an uninterrupted one (the session's `sft_dir`, same config).

Real parts only: the tiny TIR SFT of `tiny_tir.SMALL` (expert episodes through the real sandbox), real signals
(SIGINT to this process between steps; SIGTERM and SIGKILL to the CLI in a subprocess), real files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_tir import SMALL, SMALL_SFT_STEPS

from trainer.runtime.logger import read_metrics
from trainer.setup.build import build_config
from trainer.sft import resume as sft_resume
from trainer.sft.train import run_sft

pytestmark = pytest.mark.smoke


def _steps_logged(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for_steps(out: Path, steps: int, run: subprocess.Popen | None = None, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while _steps_logged(out) < steps:
        assert time.monotonic() < deadline, f"SFT did not reach step {steps} in {timeout} s"
        assert run is None or run.poll() is None, f"SFT ended (exit {run.returncode}) before step {steps}"
        time.sleep(0.02)


def _assert_same_as_uninterrupted(out: Path, reference: Path) -> None:
    records = read_metrics(out)
    assert [r["step"] for r in records] == list(range(1, SMALL_SFT_STEPS + 1))  # each step logged once
    assert [r["sft/loss"] for r in records] == [r["sft/loss"] for r in read_metrics(reference)]
    got, want = load_file(out / "model.safetensors"), load_file(reference / "model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert (out / "tokenizer.json").read_text() == (reference / "tokenizer.json").read_text()
    assert not sft_resume.resume_dir(out).exists()  # removed once the model is saved


def test_sigint_stops_between_steps_and_the_rerun_matches_an_uninterrupted_sft(tmp_path, sft_dir):
    cfg = build_config(None, SMALL + [f"sft.output_dir={tmp_path}", "sft.save_every=0"])
    watcher = threading.Thread(target=lambda: (_wait_for_steps(tmp_path, 40), os.kill(os.getpid(), signal.SIGINT)))
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sft(cfg, show_progress=False)
    finally:
        watcher.join()
    stopped_at = _steps_logged(tmp_path)
    assert 40 <= stopped_at < SMALL_SFT_STEPS
    assert torch.load(tmp_path / "resume" / "state.pt", weights_only=False)["step"] == stopped_at
    assert not (tmp_path / "sft_meta.json").exists() and not (tmp_path / "model.safetensors").exists()

    run_sft(cfg, show_progress=False)
    assert json.loads((tmp_path / "sft_meta.json").read_text())["resumed_from_step"] == stopped_at
    _assert_same_as_uninterrupted(tmp_path, sft_dir)


def test_the_cli_resumes_after_sigterm_and_after_sigkill(tmp_path, sft_dir):
    cmd = [sys.executable, "-m", "app.cli", "sft", "--no-progress", *SMALL, f"sft.output_dir={tmp_path}",
           "sft.save_every=20", "torch_threads=1"]  # pytest runs torch on 1 thread (tests/conftest.py)
    log = tmp_path / "stderr.log"

    def start() -> subprocess.Popen:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("a"))

    def saved_step() -> int:
        return torch.load(tmp_path / "resume" / "state.pt", weights_only=False)["step"]

    run = start()  # SIGTERM: saves after the step in flight, exits 143 as `alprl train` does
    _wait_for_steps(tmp_path, 30, run)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    assert saved_step() == _steps_logged(tmp_path) >= 30

    run = start()  # SIGKILL: no handler runs; the last periodic resume point (every 20 steps) is what is left
    _wait_for_steps(tmp_path, 70, run)
    run.kill()
    run.wait(timeout=60)
    killed_at, saved = _steps_logged(tmp_path), saved_step()
    last = 20 * (killed_at // 20)  # or the save before, when the kill fell between logging step `last` and saving it
    assert saved in (last, last - 20) and saved >= 60

    assert subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=log.open("a"), timeout=600).returncode == 0, \
        log.read_text()[-3000:]
    assert "resuming" in log.read_text()
    assert json.loads((tmp_path / "sft_meta.json").read_text())["resumed_from_step"] == saved
    _assert_same_as_uninterrupted(tmp_path, sft_dir)


def test_a_resume_point_of_another_config_is_ignored(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    (tmp_path / sft_resume.RESUME_DIR).mkdir()
    sft_resume.save_state(tmp_path, "config-a", 7, [1.0] * 7, model, optimizer, schedule)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    assert sft_resume.load_state(tmp_path, "config-b", model, optimizer, schedule) == (0, [])
    assert sft_resume.saved_step(tmp_path, "config-b") is None
    assert sft_resume.load_state(tmp_path, "config-a", model, optimizer, schedule) == (7, [1.0] * 7)
    assert torch.equal(model.weight, before)
