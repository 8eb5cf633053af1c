"""SandboxFusion's wire format on the client side: the /run_code body, and answers (its RunCodeResponse, a session
cell's CommandRunResult) mapped onto `ExecutionResult`; also the results a client makes up itself (gave up, lost
session). Works against SandboxFusion servers too.
"""

from __future__ import annotations

import base64

from sandbox.types import ExecutionResult


def run_code_body(code: str, timeout_s: float, memory_limit_mb: int, stdin: str) -> dict:
    """A SandboxFusion RunCodeRequest (its compile_timeout, unused for python, left to the server's default)."""
    return {"code": code, "language": "python", "run_timeout": timeout_s, "memory_limit_MB": memory_limit_mb,
            "stdin": stdin, "files": {}, "fetch_files": []}


def from_run_code(body: dict) -> ExecutionResult:
    """SandboxFusion RunCodeResponse → ExecutionResult (works against SandboxFusion servers too)."""
    run = body.get("run_result") or {}
    status = body.get("status")
    common = {"stdout": run.get("stdout") or "", "wall_time_s": run.get("execution_time") or 0.0,
              "stdout_truncated": bool(run.get("stdout_truncated")),
              "stderr_truncated": bool(run.get("stderr_truncated")),
              "files": {p: base64.b64decode(d) for p, d in (body.get("files") or {}).items()}}
    if status == "SandboxError" or run.get("status") == "Error":
        return ExecutionResult("SandboxError", stderr=body.get("message") or run.get("stderr") or "", **common)
    if run.get("status") == "TimeLimitExceeded":
        return ExecutionResult("TimeLimitExceeded", stderr=run.get("stderr") or "", return_code=None,
                               killed_reason="timeout", **common)
    return ExecutionResult("Success" if status == "Success" else "Failed", stderr=run.get("stderr") or "",
                           return_code=run.get("return_code"), killed_reason=run.get("killed_reason"), **common)


def from_session_cell(body: dict) -> ExecutionResult:
    result = from_run_code({"status": "Success" if body.get("return_code") == 0 and body.get("status") == "Finished"
                            else ("SandboxError" if body.get("status") == "Error" else "Failed"), "run_result": body})
    return ExecutionResult(**{**result.to_dict(), "session_lost": bool(body.get("session_lost"))})


def lost_session(session_id: str, why: str) -> ExecutionResult:
    return ExecutionResult("SandboxError", stderr=f"session {session_id} lost: {why}", session_lost=True)


def give_up(what: str, last_error: str) -> ExecutionResult:
    return ExecutionResult("SandboxError", stderr=f"sandbox unreachable after retries ({what}): {last_error}")
