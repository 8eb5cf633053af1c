"""Wire-independent result type shared by the executor, the HTTP client and the envs.

Statuses follow SandboxFusion's run status names so the HTTP layer maps 1:1:
``Success`` (exit 0), ``Failed`` (non-zero exit or killed by a signal), ``TimeLimitExceeded``
(wall-clock limit hit, whole process tree killed), ``SandboxError`` (the sandbox itself failed:
could not start the process, server unreachable after retries, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

from sandbox.settings import RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY

Status = Literal["Success", "Failed", "TimeLimitExceeded", "SandboxError"]


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of running one Python snippet.

    return_code: exit status, negative = killed by that signal (-9 SIGKILL, -11 SIGSEGV); None on a time limit
    or a sandbox error. wall_time_s: seconds from start to exit, queue wait excluded. killed_reason: "timeout",
    "output" (printed far past the cap) or None. session_lost: a session's interpreter is gone (session mode).
    files: fetched files, path → bytes.
    """

    status: Status
    stdout: str = ""
    stderr: str = ""
    return_code: int | None = None
    wall_time_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    killed_reason: str | None = None
    session_lost: bool = False
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "Success"

    def to_dict(self) -> dict:
        return asdict(self)


class CodeRunner(Protocol):
    """What an environment needs from a sandbox: run a snippet, get an ExecutionResult.

    `timeout_s` is wall-clock seconds; `memory_limit_mb` -1 (`SERVER_DEFAULT_MEMORY`) is the server's
    `default_memory_mb` (`sandbox.settings`, where every default is stated).

    Implementations never raise for untrusted-code problems (timeouts, crashes, huge output);
    infrastructure failures come back as ``status="SandboxError"``.
    """

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult: ...

    def close(self) -> None: ...


class SessionRunner(Protocol):
    """A persistent interpreter: `run` calls share variables; what `LocalExecutor.session()` and
    `SandboxClient.session()` return (see `sandbox.client` for the lost-session rules). `stdin` and
    `memory_limit_mb` do not apply to cells.

    Never raises: once the interpreter is gone every `run` returns ``session_lost=True``.
    """

    session_id: str

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult: ...

    def close(self) -> None: ...
