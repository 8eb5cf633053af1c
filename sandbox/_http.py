"""Pieces shared by the sync and async HTTP clients: endpoint rotation, retry policy, wire → ExecutionResult.

Retry rules (reference/sandbox.md §5, "alprl's own client"): connection errors, 429, 5xx and SandboxError
answers are retried with jittered exponential backoff (at least the server's Retry-After); a Failed or
TimeLimitExceeded result is an answer, never retried. Session cells are not idempotent: they are retried
only when the request cannot have reached the interpreter (connection refused, 429).
"""

from __future__ import annotations

import base64
import random
import threading
import time
from dataclasses import dataclass

from sandbox.types import ExecutionResult

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
DOWN_FOR_S = 5.0  # an endpoint that refused a connection is skipped this long


def parse_urls(urls: str | list[str] | tuple[str, ...]) -> list[str]:
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    cleaned = [u.strip().rstrip("/") for u in items if u and u.strip()]
    for url in cleaned:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"sandbox url {url!r} must start with http:// or https:// "
                             "(e.g. sandbox.url=http://127.0.0.1:8080, comma-separate several)")
        if url.endswith("/run_code"):
            raise ValueError(f"sandbox url {url!r}: give the base URL without /run_code")
    if not cleaned:
        raise ValueError("no sandbox url given")
    return cleaned


class Endpoints:
    """Round-robin over base URLs, skipping ones that recently refused connections (thread-safe)."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._next = 0
        self._down_until = dict.fromkeys(urls, 0.0)
        self._lock = threading.Lock()

    def pick(self) -> str:
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.urls)):
                url = self.urls[self._next % len(self.urls)]
                self._next += 1
                if self._down_until[url] <= now:
                    return url
            return min(self.urls, key=self._down_until.__getitem__)  # all down: try the one back soonest

    def mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + DOWN_FOR_S


@dataclass(frozen=True)
class RetryPolicy:
    """attempts: total tries. Delay before try k (k ≥ 1): min(max_s, base_s·2^(k-1)) × U(0.5, 1.5).

    budget_s: None = `attempts` tries; a number = keep retrying (however many tries) while the time since the first
    try plus the next delay stays within budget_s seconds (0: one try). One try can itself take up to its HTTP
    timeout, so a call may end up to one request timeout past the budget.
    """

    attempts: int = 5
    base_s: float = 0.05
    max_s: float = 2.0
    budget_s: float | None = None

    def again(self, attempt: int, elapsed_s: float, delay_s: float) -> bool:
        """Whether to make try `attempt + 1` after `elapsed_s` seconds and a `delay_s` wait."""
        if self.budget_s is None:
            return attempt < self.attempts
        return elapsed_s + delay_s <= self.budget_s

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        backoff = min(self.max_s, self.base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
        if retry_after and retry_after.isdigit():
            backoff = max(backoff, min(float(retry_after), self.max_s * 4))
        return backoff


def run_code_body(code: str, timeout_s: float, memory_limit_mb: int, stdin: str) -> dict:
    return {"code": code, "language": "python", "run_timeout": timeout_s, "memory_limit_MB": memory_limit_mb,
            "stdin": stdin, "files": {}, "fetch_files": [], "compile_timeout": 10}


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
