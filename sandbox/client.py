"""How environments reach a sandbox: `make_runner(url)` returns a CodeRunner.

- ``url=None``: the in-process `LocalExecutor` (a child process per call; no server).
- ``url="http://host:port"`` (or a comma-separated list): the HTTP service (issue 3).
The env only sees the `CodeRunner` protocol, so switching paths never changes env code.
"""

from __future__ import annotations

from sandbox.executor import LocalExecutor
from sandbox.types import CodeRunner, ExecutionResult

__all__ = ["CodeRunner", "ExecutionResult", "LocalExecutor", "make_runner"]


def make_runner(url: str | None = None) -> CodeRunner:
    if not url:
        return LocalExecutor()
    raise ValueError(f"sandbox url {url!r}: the HTTP sandbox client is not available in this version; "
                     "leave sandbox.url empty to use the in-process executor")
