"""HTTP routes: thin adapters from wire models to `SandboxService` (all logic lives in the core).

SandboxFusion surface: `GET /v1/ping`, `POST /run_code`. Native: `POST /execute`, sessions, `GET /v1/info`,
`GET /healthz`, `GET /metrics`. Anything user code does yields HTTP 200 with a result; 4xx only for bad
requests; overload → 429 + Retry-After (see `sandbox.service.admission`); API key and per-client cap:
`sandbox.service.auth`.
"""

from __future__ import annotations

import base64

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from sandbox.execution.pool import RunRequest
from sandbox.execution.sessions import SessionLimit
from sandbox.isolation.file_paths import absolute_paths
from sandbox.service.sandbox_service import SandboxService
from sandbox.service.schemas import (
    CommandRunResult,
    ExecuteRequest,
    ExecuteResponse,
    RunCodeRequest,
    RunCodeResponse,
    SessionCreated,
    SessionExecuteRequest,
    SessionExecuteResponse,
    decode_files,
)
from sandbox.types import ExecutionResult

router = APIRouter()
MAX_STDIN_BYTES = 16 << 20


def _service(request: Request) -> SandboxService:
    return request.app.state.sandbox


def _run_request(service: SandboxService, code: str, timeout_s: float, memory_mb: int, stdin: str,
                 files: dict[str, str | None], fetch_files: list[str]) -> RunRequest:
    s = service.settings
    if len(code.encode("utf-8", "surrogatepass")) > s.max_code_bytes:
        raise HTTPException(422, f"code is larger than {s.max_code_bytes} bytes (SANDBOX_MAX_CODE_BYTES)")
    if len(stdin) > MAX_STDIN_BYTES:
        raise HTTPException(422, f"stdin is larger than {MAX_STDIN_BYTES} bytes")
    decoded = decode_files(files)
    if sum(map(len, decoded.values())) > s.max_files_bytes:
        raise HTTPException(422, f"files total more than {s.max_files_bytes} bytes (SANDBOX_MAX_FILES_BYTES)")
    absolute = absolute_paths(decoded, fetch_files)
    if absolute and "mount" not in service.backend.info()["layers"]:
        raise HTTPException(422, f"absolute file path {absolute[0]!r}: this server has no private mount layer to "
                            "map it into the run (see docs/sandbox.md); use a relative path")
    return RunRequest(code, timeout_s, memory_mb, stdin, decoded, tuple(fetch_files))


def _b64(files: dict[str, bytes]) -> dict[str, str]:
    return {path: base64.b64encode(data).decode() for path, data in files.items()}


def command_result(r: ExecutionResult) -> dict:
    """ExecutionResult → SandboxFusion CommandRunResult (Finished | TimeLimitExceeded | Error)."""
    status = {"TimeLimitExceeded": "TimeLimitExceeded", "SandboxError": "Error"}.get(r.status, "Finished")
    return {"status": status, "execution_time": r.wall_time_s, "return_code": r.return_code, "stdout": r.stdout,
            "stderr": r.stderr, "stdout_truncated": r.stdout_truncated, "stderr_truncated": r.stderr_truncated,
            "killed_reason": r.killed_reason}


def run_code_response(r: ExecutionResult, pod: str | None) -> dict:
    """SandboxFusion `parse_run_status`: Error → SandboxError; time limit or non-zero code → Failed."""
    status = {"Success": "Success", "SandboxError": "SandboxError"}.get(r.status, "Failed")
    return {"status": status, "message": r.stderr if status == "SandboxError" else "", "compile_result": None,
            "run_result": command_result(r), "executor_pod_name": pod, "files": _b64(r.files)}


@router.get("/v1/ping")
async def ping() -> str:
    return "pong"


@router.post("/run_code", response_model=RunCodeResponse)
async def run_code(body: RunCodeRequest, request: Request):
    service = _service(request)
    pod = service.settings.pod_name or None
    if body.language != "python":
        return JSONResponse({"status": "SandboxError", "message": f"unsupported language: {body.language} "
                             "(this sandbox runs python)", "compile_result": None, "run_result": None,
                             "executor_pod_name": pod, "files": {}})
    req = _run_request(service, body.code, body.run_timeout, body.memory_limit_MB, body.stdin or "", body.files,
                       body.fetch_files)
    result, _ = await service.run(req)
    return JSONResponse(run_code_response(result, pod))


@router.post("/execute", response_model=ExecuteResponse)
async def execute(body: ExecuteRequest, request: Request):
    service = _service(request)
    req = _run_request(service, body.code, body.timeout_s, body.memory_limit_mb, body.stdin, body.files,
                       body.fetch_files)
    result, waited = await service.run(req)
    payload = result.to_dict()
    payload.pop("session_lost")
    payload.update(files=_b64(result.files), queue_wait_s=waited)
    return JSONResponse(payload)


@router.post("/sessions", response_model=SessionCreated)
async def create_session(request: Request):
    service = _service(request)
    if service.sessions is None:
        raise HTTPException(404, "sessions are disabled (SANDBOX_MAX_SESSIONS=0 or the docker backend)")
    try:
        session = await service.session_create()
    except SessionLimit as exc:
        return JSONResponse({"detail": str(exc)}, status_code=429,
                            headers={"Retry-After": str(service.settings.retry_after_s)})
    return {"session_id": session.id, "ttl_s": service.settings.session_ttl_s}


@router.post("/sessions/{session_id}/execute", response_model=SessionExecuteResponse)
async def session_execute(session_id: str, body: SessionExecuteRequest, request: Request):
    service = _service(request)
    if service.sessions is None:
        raise HTTPException(404, "sessions are disabled")
    if len(body.code.encode("utf-8", "surrogatepass")) > service.settings.max_code_bytes:
        raise HTTPException(422, f"code is larger than {service.settings.max_code_bytes} bytes")
    try:
        result = await service.session_execute(session_id, body.code, body.timeout)
    except KeyError:
        raise HTTPException(404, f"session {session_id!r} not found (never created, deleted, expired or lost)") \
            from None
    return JSONResponse({**command_result(result), "session_lost": result.session_lost})


@router.delete("/sessions/{session_id}")
async def delete_session(session_id: str, request: Request):
    service = _service(request)
    if service.sessions is None or not await service.session_delete(session_id):
        raise HTTPException(404, f"session {session_id!r} not found")
    return {"deleted": True}


@router.get("/v1/info")
async def info(request: Request):
    return {**_service(request).info(), **request.app.state.access.info()}


@router.get("/healthz")
async def healthz(request: Request):
    info = _service(request).info()
    healthy = info.get("idle_workers", 1) + info.get("in_flight", 0) > 0
    return JSONResponse({"status": "ok" if healthy else "degraded", **info}, status_code=200)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request):
    return PlainTextResponse(_service(request).metrics.render(), media_type="text/plain; version=0.0.4")


__all__ = ["router", "CommandRunResult"]
