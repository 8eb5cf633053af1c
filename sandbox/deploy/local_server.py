"""Run a real sandbox server process for the demo, tests and benchmarks.

    with serve_in_background(workers=2, max_queue=16) as url:
        runner = make_runner(url)

Starts ``python -m sandbox.deploy.cli serve --port 0`` (a free loopback port, chosen by the server itself, so there is
no race), waits for ``GET /v1/ping``, and always stops the process on exit (SIGTERM, then SIGKILL). Keyword
settings become ``SANDBOX_*`` environment variables of that process (``allow_unsafe`` →
``ALPRL_SANDBOX_ALLOW_UNSAFE``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator

import httpx

from sandbox.settings import Settings, env_name

READY_PREFIX = "alprl-sandbox listening on "


class ServerStartError(RuntimeError):
    """The server process exited or did not answer /v1/ping in time; the message holds its last output lines."""


class ServerProcess:
    """Handle to a started server: its URL and process (tests use `.proc.pid`, `.output_tail()`)."""

    def __init__(self, proc: subprocess.Popen, url: str, tail: deque, closed: threading.Event):
        self.proc, self.url, self._tail, self._closed = proc, url, tail, closed

    def output_tail(self) -> str:
        """The last 60 lines the server and its zygotes wrote (stdout and stderr together)."""
        return "".join(self._tail)

    def wait_output_closed(self, timeout_s: float) -> bool:
        """Wait until every process writing to the output pipe has exited: the server and, since they inherit
        its stderr, every zygote. True if that happened within `timeout_s`."""
        return self._closed.wait(timeout_s)


def _env_for(settings: dict) -> dict[str, str]:
    known = set(Settings.__dataclass_fields__)
    env = dict(os.environ)
    for key, value in settings.items():
        if key not in known:
            raise TypeError(f"serve_in_background: unknown setting {key!r}; valid: {', '.join(sorted(known))}")
        env[env_name(key)] = str(int(value) if isinstance(value, bool) else value)
    return env


def _pump_output(stream, tail: deque, ready: list, event: threading.Event, closed: threading.Event) -> None:
    for line in stream:
        tail.append(line)
        if line.startswith(READY_PREFIX) and not ready:
            ready.append(line[len(READY_PREFIX):].strip())
            event.set()
    event.set()
    closed.set()


@contextlib.contextmanager
def start_server(host: str = "127.0.0.1", port: int = 0, *, timeout_s: float = 60.0,
                 **settings) -> Iterator[ServerProcess]:
    """Like `serve_in_background` but yields the `ServerProcess` handle."""
    cmd = [sys.executable, "-m", "sandbox.deploy.cli", "serve", "--host", host, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=_env_for(settings), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    tail: deque = deque(maxlen=60)
    ready: list[str] = []
    seen, closed = threading.Event(), threading.Event()
    threading.Thread(target=_pump_output, args=(proc.stdout, tail, ready, seen, closed), daemon=True).start()
    try:
        url = _wait_ready(proc, ready, seen, tail, timeout_s)
        yield ServerProcess(proc, url, tail, closed)
    finally:
        _stop(proc)


def _wait_ready(proc, ready: list, seen: threading.Event, tail: deque, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    seen.wait(timeout_s)
    if not ready:
        raise ServerStartError(f"sandbox server did not start (exit code {proc.poll()}):\n{''.join(tail)}")
    url = ready[0]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"{url}/v1/ping", timeout=2.0).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise ServerStartError(f"sandbox server at {url} never answered /v1/ping (exit code {proc.poll()}):\n"
                           f"{''.join(tail)}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # graceful: the lifespan closes zygotes and sessions
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def serve_in_background(host: str = "127.0.0.1", port: int = 0, **settings) -> Iterator[str]:
    """Start a sandbox server subprocess; yields its base URL (e.g. ``http://127.0.0.1:41234``)."""
    with start_server(host, port, **settings) as server:
        yield server.url
