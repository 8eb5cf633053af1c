"""The stop deadline's setting: ALPRL_STOP_TIMEOUT_S (the signal behaviour itself: test_cli_signals.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from app.stop_guard import STOP_TIMEOUT_S, StopGuard
from trainer.config.errors import ConfigError


@pytest.mark.parametrize("raw, expected", [("", STOP_TIMEOUT_S), ("2.5", 2.5), (" 7 ", 7.0)])
def test_stop_timeout_from_env(monkeypatch, raw, expected):
    monkeypatch.setenv("ALPRL_STOP_TIMEOUT_S", raw)
    assert StopGuard.timeout_from_env() == expected


def test_bad_stop_timeout_is_one_line_and_exit_2(tmp_path):
    env = dict(os.environ, ALPRL_STOP_TIMEOUT_S="soon")
    done = subprocess.run([sys.executable, "-m", "app.cli", "train", "--no-progress",
                           f"output_dir={tmp_path}"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == ("alprl train: error: ALPRL_STOP_TIMEOUT_S='soon': expected seconds > 0 (default 30)\n")


@pytest.mark.parametrize("raw", ["0", "-3", "nan"])
def test_stop_timeout_must_be_positive(monkeypatch, raw):
    monkeypatch.setenv("ALPRL_STOP_TIMEOUT_S", raw)
    with pytest.raises(ConfigError, match="ALPRL_STOP_TIMEOUT_S"):
        StopGuard.timeout_from_env()


def test_a_run_without_signals_restores_the_previous_handlers():
    # main() may be called in-process (tests, notebooks): their own Ctrl-C handling must come back afterwards
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    guard = StopGuard("train", 5.0).install()
    assert all(signal.getsignal(sig) == guard._on_signal for sig in before)
    guard.uninstall()
    assert {sig: signal.getsignal(sig) for sig in before} == before
