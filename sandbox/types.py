"""Wire-independent result type shared by the executor, the HTTP client and the envs.

Statuses follow SandboxFusion's run status names so the HTTP layer maps 1:1:
``Success`` (exit 0), ``Failed`` (non-zero exit or killed by a signal), ``TimeLimitExceeded``
(wall-clock limit hit, whole process tree killed), ``SandboxError`` (the sandbox itself failed:
could not start the process, server unreachable after retries, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Protocol

Status = Literal["Success", "Failed", "TimeLimitExceeded", "SandboxError"]


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of running one Python snippet."""

    status: Status
    stdout: str = ""
    stderr: str = ""
    return_code: int | None = None
    wall_time_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "Success"

    def to_dict(self) -> dict:
        return asdict(self)


class CodeRunner(Protocol):
    """What an environment needs from a sandbox: run a snippet, get an ExecutionResult.

    Implementations never raise for untrusted-code problems (timeouts, crashes, huge output);
    infrastructure failures come back as ``status="SandboxError"``.
    """

    def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
            stdin: str = "") -> ExecutionResult: ...

    def close(self) -> None: ...
