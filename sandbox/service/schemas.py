"""HTTP request/response models: SandboxFusion's wire format (bytedance/SandboxFusion `sandbox/server/sandbox_api.py`,
`sandbox/runners/types.py`; field names, defaults and statuses kept) plus alprl's native routes.

Files travel base64-encoded. Paths must be without '..' or empty parts (422 otherwise). Relative paths are written
into, and fetched from, the run's private workdir; absolute ones (SandboxFusion allows them) are mapped into it
and bind-mounted at their directory in the run's own mount namespace (`sandbox.isolation.file_paths`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox.isolation.file_paths import safe_path
from sandbox.settings import RUN_TIMEOUT_S, SANDBOXFUSION_RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY

# Every language value the sandbox-fusion client (0.3.7 models.Language) may send; alprl runs "python" only.
Language = Literal["python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash",
                   "typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia",
                   "pytest", "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket",
                   "gtest", "react"]


def _check_paths(paths) -> None:
    for path in paths:
        try:
            safe_path(path)
        except ValueError as exc:
            raise ValueError(f"file path {path!r} must be without '..' or empty parts ({exc})") from None


def decode_files(files: dict[str, str | None]) -> dict[str, bytes]:
    """base64 values → bytes; null entries are ignored (as SandboxFusion does)."""
    out = {}
    for path, data in files.items():
        if data is None:
            continue
        try:
            out[path] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"files[{path!r}] is not valid base64") from None
    return out


class _Files(BaseModel):
    model_config = ConfigDict(extra="ignore")
    files: dict[str, str | None] = Field({}, description="path → base64 content, written before the run")
    fetch_files: list[str] = Field([], description="paths read back after the run (missing ones are omitted)")

    @field_validator("files")
    @classmethod
    def _files_ok(cls, v: dict[str, str | None]) -> dict[str, str | None]:
        _check_paths(v)
        decode_files(v)
        return v

    @field_validator("fetch_files")
    @classmethod
    def _fetch_ok(cls, v: list[str]) -> list[str]:
        _check_paths(v)
        return v


class RunCodeRequest(_Files):
    compile_timeout: float = Field(10, description="unused for python")
    run_timeout: float = Field(SANDBOXFUSION_RUN_TIMEOUT_S, gt=0,
                               description="wall-clock seconds, clamped to the server maximum")
    memory_limit_MB: int = Field(SERVER_DEFAULT_MEMORY,
                                 description="-1 = the server's default_memory_mb; clamped to the server cap")
    code: str
    stdin: str | None = None
    language: Language


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    # alprl extensions (pydantic clients ignore unknown fields)
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    killed_reason: Literal["timeout", "memory", "output"] | None = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


class ExecuteRequest(_Files):
    """Native route: same core, ExecutionResult-shaped answer."""

    code: str
    timeout_s: float = Field(RUN_TIMEOUT_S, gt=0)
    memory_limit_mb: int = SERVER_DEFAULT_MEMORY
    stdin: str = ""


class ExecuteResponse(BaseModel):
    status: Literal["Success", "Failed", "TimeLimitExceeded", "SandboxError"]
    stdout: str
    stderr: str
    return_code: int | None
    wall_time_s: float
    stdout_truncated: bool
    stderr_truncated: bool
    killed_reason: str | None
    files: dict[str, str]
    queue_wait_s: float


class SessionCreated(BaseModel):
    session_id: str
    ttl_s: float


class SessionExecuteRequest(BaseModel):
    code: str
    timeout: float = Field(RUN_TIMEOUT_S, gt=0,
                           description="wall-clock seconds for this cell; hitting it ends the session")


class SessionExecuteResponse(CommandRunResult):
    session_lost: bool = False
