"""How environments reach a sandbox: `make_runner(url)` returns a CodeRunner.

- ``url=None`` / ``""``: the in-process `sandbox.executor.LocalExecutor` (warm zygote pool in this process; no
  server). This module does not import the executor: a process that only talks HTTP (an env given a URL, a
  trainer whose sandbox is a service) never loads the zygote, seccomp and worker modules; `make_runner(None)`
  loads them when it builds the local runner.
- ``url="http://host:8080"`` or ``"http://a:8080,http://b:8080"``: `SandboxClient`, the HTTP client (httpx).
The env only sees the CodeRunner protocol (`run(code, *, timeout_s, memory_limit_mb, stdin)`, `close()`), so
switching paths never changes env code. `AsyncSandboxClient` is the asyncio twin with the same methods.

Behaviour: endpoints are used round-robin; one that refuses connections is skipped for 5 s. Connection errors,
429, 5xx and SandboxError answers are retried with jittered exponential backoff (honouring Retry-After), each
try on the next live endpoint, for 5 tries or, with `RetryPolicy.budget_s` (`make_runner(url, retry_s=...)`, the
config's `env.sandbox_retry_s`), for that many seconds; Failed / TimeLimitExceeded results are answers (the
program's own outcome) and never retried. At most `max_in_flight` requests per client are
in flight. Nothing raises for sandbox trouble: after the last retry the result is ``status="SandboxError"``.
Stateless runs go through SandboxFusion's ``POST /run_code``, so this client also works against SandboxFusion.

API key: a server started with ``SANDBOX_API_KEY`` (`sandbox.auth`) wants ``Authorization: Bearer <key>``; the
client sends the ``SANDBOX_API_KEY`` of its own process environment (the first one of a comma list, so a trainer
and the server it starts can share one environment), or ``api_key=`` given to the constructor. A 401 is a
configuration error, not sandbox trouble: it raises `SandboxAuthError` at once (naming the URL and the fix),
with no retries. The per-client cap answers 429 + Retry-After, retried like any overload.

Sessions (the env's ``exec_mode="session"``): a persistent interpreter whose variables survive between calls.

    runner = make_runner(url)              # or make_runner(None): local sessions work the same way
    with runner.session() as sess:         # POST /sessions on one endpoint; the session stays pinned to it
        sess.run("x = 6")                  # POST /sessions/{id}/execute  → ExecutionResult
        sess.run("print(x * 7)").stdout    # '42\\n'
                                           # leaving the block (or sess.close()): DELETE /sessions/{id}

`session()` never raises (a 401 aside, see above): if creation fails, or a cell times out / kills the
interpreter / the session expired (TTL) or vanished, `run()` returns a result with ``session_lost=True`` (status
SandboxError when nothing ran) and every later `run()` on that handle does too — the env turns that into an error observation and
``info["session_lost"]``. A cell's timeout ends its session (reference/sandbox.md §1). Cells are retried only
when they cannot have run (connection refused, 429). `stdin` and `memory_limit_mb` do not apply to cells.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import httpx

from sandbox._http import (
    RETRY_STATUSES,
    Endpoints,
    RetryPolicy,
    from_run_code,
    from_session_cell,
    give_up,
    lost_session,
    parse_urls,
    run_code_body,
)
from sandbox.types import CodeRunner, ExecutionResult

__all__ = ["AsyncSandboxClient", "CodeRunner", "ExecutionResult", "HttpSession", "SandboxAuthError",
           "SandboxClient", "make_runner"]
HTTP_OVERHEAD_S = 10.0  # HTTP timeout = run timeout + this (queueing, transfer), as verl does


def make_runner(url: str | None = None, *, retry_s: float | None = None) -> CodeRunner:
    """None/"" → in-process LocalExecutor; one URL or a comma-separated list → SandboxClient.

    retry_s: the client's retry budget per call (`RetryPolicy.budget_s`; None: its 5 tries); the local path ignores it.
    """
    if not url:
        # Imported here, not at the top: HTTP-only processes must not load the executor (see the docstring).
        from sandbox.executor import LocalExecutor

        return LocalExecutor()
    return SandboxClient(url, retry=None if retry_s is None else RetryPolicy(budget_s=retry_s))


class SandboxAuthError(RuntimeError):
    """The server answered 401: no API key was sent, or the wrong one. Retrying cannot help."""


def _env_key() -> str:
    return next((k.strip() for k in os.environ.get("SANDBOX_API_KEY", "").split(",") if k.strip()), "")


def _shown(base: str) -> str:
    """The URL without any user:password part, for messages."""
    scheme, sep, rest = base.partition("://")
    return scheme + sep + rest.rpartition("@")[2]


def _transient_answer(resp: httpx.Response) -> bool:
    if resp.status_code != 200:
        return False
    try:
        return resp.json().get("status") == "SandboxError"
    except ValueError:
        return True


class _Base:
    def __init__(self, urls: str | list[str], *, retry: RetryPolicy | None = None, max_in_flight: int = 64,
                 connect_timeout_s: float = 5.0, api_key: str | None = None):
        self.endpoints = Endpoints(parse_urls(urls))
        self.api_key = _env_key() if api_key is None else api_key
        self._headers = {"Accept": "application/json"}
        if self.api_key:
            self._headers["Authorization"] = f"Bearer {self.api_key}"
        self.retry = retry or RetryPolicy()
        self.max_in_flight = max_in_flight
        self.connect_timeout_s = connect_timeout_s
        self._limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)

    def _timeout(self, run_timeout_s: float) -> httpx.Timeout:
        return httpx.Timeout(run_timeout_s + HTTP_OVERHEAD_S, connect=self.connect_timeout_s)

    def _classify(self, base: str, resp: httpx.Response | None, exc: Exception | None, idempotent: bool,
                  transient) -> tuple[bool, str, str | None]:
        """→ (retry?, error text, Retry-After). resp None means the request raised `exc`."""
        if exc is not None:
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                self.endpoints.mark_down(base)
                return True, f"{base}: {exc!r}", None
            return idempotent, f"{base}: {exc!r}", None
        if resp.status_code == 401:
            sent = self.api_key or "@" in base  # httpx sends a URL's user:password as Basic auth
            what = "rejected the API key it was sent" if sent else "needs an API key and none was sent"
            raise SandboxAuthError(f"sandbox {_shown(base)} {what} (HTTP 401): set SANDBOX_API_KEY in this "
                                   "process's environment to the server's key (or pass api_key=...)")
        if resp.status_code in RETRY_STATUSES and (idempotent or resp.status_code == 429):
            return True, f"{base}: HTTP {resp.status_code}", resp.headers.get("retry-after")
        if transient is not None and transient(resp):
            return True, f"{base}: SandboxError answer", None
        return False, "", None


class SandboxClient(_Base):
    """Synchronous CodeRunner over HTTP. Thread-safe; reuse one per process."""

    def __init__(self, urls: str | list[str], **kwargs):
        super().__init__(urls, **kwargs)
        self._http = httpx.Client(limits=self._limits, headers=self._headers)
        self._slots = threading.BoundedSemaphore(self.max_in_flight)

    def request(self, method: str, path: str, *, json=None, timeout_s: float = 3.0, url: str | None = None,
                idempotent: bool = True, transient=None) -> tuple[httpx.Response | None, str]:
        """One logical call with retries; returns (final response or None, last error text)."""
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            base = url or self.endpoints.pick()
            resp = exc = None
            try:
                with self._slots:
                    resp = self._http.request(method, base + path, json=json, timeout=self._timeout(timeout_s))
            except httpx.HTTPError as err:
                exc = err
            again, error, retry_after = self._classify(base, resp, exc, idempotent, transient)
            if not again:
                return (resp, "") if resp is not None else (None, error)
            delay = self.retry.delay(attempt, retry_after)
            if not self.retry.again(attempt, time.monotonic() - started, delay):
                break
            time.sleep(delay)
        last = f"{error} ({attempt} tries in {time.monotonic() - started:.1f} s)"
        return (resp if resp is not None and resp.status_code == 200 else None), last

    def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
            stdin: str = "") -> ExecutionResult:
        resp, error = self.request("POST", "/run_code", json=run_code_body(code, timeout_s, memory_limit_mb, stdin),
                                   timeout_s=timeout_s, transient=_transient_answer)
        if resp is None:
            return give_up("run_code", error)
        if resp.status_code != 200:
            return ExecutionResult("SandboxError", stderr=f"HTTP {resp.status_code}: {resp.text[:500]}")
        return from_run_code(resp.json())

    def ping(self) -> bool:
        resp, _ = self.request("GET", "/v1/ping", timeout_s=0.0)
        return resp is not None and resp.status_code == 200

    def session(self) -> HttpSession:
        resp, error = self.request("POST", "/sessions", timeout_s=30.0, idempotent=False)
        if resp is None or resp.status_code != 200:
            why = error or f"HTTP {resp.status_code}: {resp.text[:200]}"
            return HttpSession(self, "", "", lost=f"could not create a session: {why}")
        return HttpSession(self, str(resp.request.url).rsplit("/sessions", 1)[0], resp.json()["session_id"])

    def close(self) -> None:
        self._http.close()


class HttpSession:
    """One persistent interpreter on one endpoint (affinity); a CodeRunner whose calls share variables."""

    def __init__(self, client: SandboxClient, base_url: str, session_id: str, *, lost: str = ""):
        self.client, self.base_url, self.session_id, self.lost = client, base_url, session_id, lost

    def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
            stdin: str = "") -> ExecutionResult:
        if self.lost:
            return lost_session(self.session_id, self.lost)
        resp, error = self.client.request("POST", f"/sessions/{self.session_id}/execute", url=self.base_url,
                                          json={"code": code, "timeout": timeout_s}, timeout_s=timeout_s,
                                          idempotent=False)
        return self._result(resp, error)

    def _result(self, resp: httpx.Response | None, error: str) -> ExecutionResult:
        if resp is None or resp.status_code == 404:
            self.lost = error or "session not found (expired, deleted or lost)"
            return lost_session(self.session_id, self.lost)
        if resp.status_code != 200:
            return ExecutionResult("SandboxError", stderr=f"HTTP {resp.status_code}: {resp.text[:500]}")
        result = from_session_cell(resp.json())
        if result.session_lost:
            self.lost = f"the interpreter ended ({result.status})"
        return result

    def close(self) -> None:
        if self.session_id and not self.lost:
            self.client.request("DELETE", f"/sessions/{self.session_id}", url=self.base_url, timeout_s=5.0)
        self.lost = self.lost or "closed"

    def __enter__(self) -> HttpSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncSandboxClient(_Base):
    """asyncio twin of SandboxClient: `await client.run(...)`, `await client.session()`, `await client.aclose()`."""

    def __init__(self, urls: str | list[str], **kwargs):
        super().__init__(urls, **kwargs)
        self._http = httpx.AsyncClient(limits=self._limits, headers=self._headers)
        self._slots = asyncio.Semaphore(self.max_in_flight)

    async def request(self, method: str, path: str, *, json=None, timeout_s: float = 3.0, url: str | None = None,
                      idempotent: bool = True, transient=None) -> tuple[httpx.Response | None, str]:
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            base = url or self.endpoints.pick()
            resp = exc = None
            try:
                async with self._slots:
                    resp = await self._http.request(method, base + path, json=json, timeout=self._timeout(timeout_s))
            except httpx.HTTPError as err:
                exc = err
            again, error, retry_after = self._classify(base, resp, exc, idempotent, transient)
            if not again:
                return (resp, "") if resp is not None else (None, error)
            delay = self.retry.delay(attempt, retry_after)
            if not self.retry.again(attempt, time.monotonic() - started, delay):
                break
            await asyncio.sleep(delay)
        last = f"{error} ({attempt} tries in {time.monotonic() - started:.1f} s)"
        return (resp if resp is not None and resp.status_code == 200 else None), last

    async def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
                  stdin: str = "") -> ExecutionResult:
        resp, error = await self.request("POST", "/run_code", timeout_s=timeout_s, transient=_transient_answer,
                                         json=run_code_body(code, timeout_s, memory_limit_mb, stdin))
        if resp is None:
            return give_up("run_code", error)
        if resp.status_code != 200:
            return ExecutionResult("SandboxError", stderr=f"HTTP {resp.status_code}: {resp.text[:500]}")
        return from_run_code(resp.json())

    async def session(self) -> AsyncHttpSession:
        resp, error = await self.request("POST", "/sessions", timeout_s=30.0, idempotent=False)
        if resp is None or resp.status_code != 200:
            why = error or f"HTTP {resp.status_code}: {resp.text[:200]}"
            return AsyncHttpSession(self, "", "", lost=f"could not create a session: {why}")
        return AsyncHttpSession(self, str(resp.request.url).rsplit("/sessions", 1)[0], resp.json()["session_id"])

    async def aclose(self) -> None:
        await self._http.aclose()


class AsyncHttpSession(HttpSession):
    async def run(self, code: str, *, timeout_s: float = 3.0, memory_limit_mb: int = 1024,
                  stdin: str = "") -> ExecutionResult:
        if self.lost:
            return lost_session(self.session_id, self.lost)
        resp, error = await self.client.request("POST", f"/sessions/{self.session_id}/execute", url=self.base_url,
                                                json={"code": code, "timeout": timeout_s}, timeout_s=timeout_s,
                                                idempotent=False)
        return self._result(resp, error)

    async def close(self) -> None:
        if self.session_id and not self.lost:
            await self.client.request("DELETE", f"/sessions/{self.session_id}", url=self.base_url, timeout_s=5.0)
        self.lost = self.lost or "closed"

    async def __aenter__(self) -> AsyncHttpSession:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
