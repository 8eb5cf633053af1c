"""sandbox/deploy/build_image.sh builds once per machine however many callers start it: the whole script runs under an
exclusive flock on /tmp/alprl-sandbox-image.lock, so a second caller waits and then finds every step done, instead
of racing the first on dpkg's lock (apt-get install debootstrap), the wheelhouse and the image tags.

Real parts only: the script, the Docker engine, flock(2) taken from this process. They hold with other image users
running beside them (another xdist worker's `sandbox_image` fixture, a `make sandbox-image`): those take the same
lock, so they only wait for these tests or make them wait.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/alprl-sandbox-image.lock")  # the script's default SANDBOX_IMAGE_LOCK
WAITING = "another build holds"  # what the script prints when it finds the lock taken
BUILD_TIMEOUT_S = 1500  # a first build on a fresh machine: debootstrap base + wheels + docker build


def _start(log: Path) -> subprocess.Popen:
    env = {**os.environ, "PIP": f"{sys.executable} -m pip"}  # as tests/docker/conftest.py runs it
    for var in ("SANDBOX_IMAGE_LOCK", "SANDBOX_IMAGE_LOCK_WAIT_S"):  # the default lock, the one everyone shares
        env.pop(var, None)
    with log.open("w") as out:  # a file, not a pipe: nothing blocks on a full pipe while we wait
        return subprocess.Popen(["bash", "sandbox/deploy/build_image.sh"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """End a build still running (its whole session: docker build, debootstrap, pip)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _require_flock() -> None:
    if shutil.which("flock") is None:
        pytest.skip("no flock command (util-linux): build_image.sh runs without its lock here")


def _skip_if_cannot_build(rc: int, log: str) -> None:
    if rc == 3:  # no base image or wheels obtainable here: the script's "cannot build on this machine"
        pytest.skip(f"the sandbox image cannot be built on this machine: {log.strip()[-300:]}")


def test_two_builds_started_together_both_succeed(docker_engine, tmp_path):
    """The race of two test workers: both start at once, one builds (on a fresh machine: installs debootstrap,
    makes the base, downloads the wheels, builds the image) while the other waits, and both exit 0."""
    _require_flock()
    logs = [tmp_path / f"build{i}.log" for i in range(2)]
    procs = [_start(log) for log in logs]
    try:
        rcs = [proc.wait(timeout=BUILD_TIMEOUT_S) for proc in procs]
    finally:
        for proc in procs:
            _stop(proc)
    texts = [log.read_text() for log in logs]
    if rcs == [3, 3]:
        _skip_if_cannot_build(3, texts[0])
    assert rcs == [0, 0], "\n\n".join(f"build {i} exited {rc}:\n{text[-3000:]}"
                                      for i, (rc, text) in enumerate(zip(rcs, texts, strict=True)))
    assert all("built alprl/sandbox:latest" in text for text in texts), texts
    assert subprocess.run(["docker", "image", "inspect", "alprl/sandbox:latest"],
                          capture_output=True).returncode == 0


def test_a_build_waits_while_the_lock_is_held_and_finishes_after(docker_engine, tmp_path):
    """While this process holds the lock, a started build does nothing (not one step) and keeps running; once the
    lock is released it goes on and exits 0. Without the lock in the script it would run straight through."""
    _require_flock()
    if not LOCK.exists():
        LOCK.touch(mode=0o666)
    log = tmp_path / "build.log"
    fd = os.open(LOCK, os.O_RDONLY)  # as the script opens it: flock needs no write access
    proc = None
    try:
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        while True:  # a build already running elsewhere (another session, `make sandbox-image`) finishes first
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"{LOCK} stayed held for {BUILD_TIMEOUT_S} s"
                time.sleep(0.5)
        try:
            proc = _start(log)
            deadline = time.monotonic() + 60
            while WAITING not in log.read_text():
                assert proc.poll() is None, (
                    f"the build exited ({proc.returncode}) while the lock was held:\n{log.read_text()[-3000:]}")
                assert time.monotonic() < deadline, f"the build never reached the lock:\n{log.read_text()}"
                time.sleep(0.1)
            time.sleep(2.0)
            assert proc.poll() is None, f"the build exited ({proc.returncode}) while the lock was held"
            lines = log.read_text().splitlines()
            assert len(lines) == 1 and WAITING in lines[0], f"the build went on while the lock was held:\n{lines}"
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        rc = proc.wait(timeout=BUILD_TIMEOUT_S)
        text = log.read_text()
        _skip_if_cannot_build(rc, text)
        assert rc == 0, text[-3000:]
        assert "built alprl/sandbox:latest" in text, text
    finally:
        os.close(fd)
        if proc is not None:
            _stop(proc)
