"""The HTTP clients: `SandboxClient` (sync, thread-safe) and `AsyncSandboxClient` (asyncio), each with its session
handle. What they retry and how is `sandbox.client.retry`; the behaviour is described in `sandbox.client`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import httpx

from sandbox.client.retry import RETRY_STATUSES, Endpoints, RetryLoop, RetryPolicy, Verdict, parse_urls
from sandbox.client.wire import from_run_code, from_session_cell, give_up, lost_session, run_code_body
from sandbox.settings import RUN_TIMEOUT_S, SERVER_DEFAULT_MEMORY
from sandbox.types import ExecutionResult

HTTP_OVERHEAD_S = 10.0  # HTTP timeout = run timeout + this (queueing, transfer), as verl does
SESSION_START_S = 30.0  # HTTP timeout base of POST /sessions (starting an interpreter)


class SandboxAuthError(RuntimeError):
    """The server answered 401: no API key was sent, or the wrong one. Retrying cannot help."""


def _env_key() -> str:
    return next((k.strip() for k in os.environ.get("SANDBOX_API_KEY", "").split(",") if k.strip()), "")


def shown_url(base: str) -> str:
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


def _run_code_result(resp: httpx.Response | None, error: str) -> ExecutionResult:
    if resp is None:
        return give_up("run_code", error)
    if resp.status_code != 200:
        return ExecutionResult("SandboxError", stderr=f"HTTP {resp.status_code}: {resp.text[:500]}")
    return from_run_code(resp.json())


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

    def _loop(self, url: str | None, idempotent: bool, transient) -> RetryLoop:
        """The retry loop of one logical call (`url`: pinned to that endpoint, as a session is)."""
        return RetryLoop(self.endpoints, self.retry,
                         lambda base, resp, exc: self._classify(base, resp, exc, idempotent, transient), url)

    def _classify(self, base: str, resp: httpx.Response | None, exc: Exception | None, idempotent: bool,
                  transient) -> Verdict:
        """→ (retry?, error text, Retry-After). resp None means the request raised `exc`."""
        if exc is not None:
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                self.endpoints.mark_down(base)
                return True, f"{base}: {exc!r}", None
            return idempotent, f"{base}: {exc!r}", None
        if resp.status_code == 401:
            sent = self.api_key or "@" in base  # httpx sends a URL's user:password as Basic auth
            what = "rejected the API key it was sent" if sent else "needs an API key and none was sent"
            raise SandboxAuthError(f"sandbox {shown_url(base)} {what} (HTTP 401): set SANDBOX_API_KEY in this "
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

    def request(self, method: str, path: str, *, timeout_s: float, json=None, url: str | None = None,
                idempotent: bool = True, transient=None) -> tuple[httpx.Response | None, str]:
        """One logical call with retries (`RetryLoop`); returns (final response or None, last error text)."""
        loop = self._loop(url, idempotent, transient)
        for base in loop:
            resp = exc = None
            try:
                with self._slots:
                    resp = self._http.request(method, base + path, json=json, timeout=self._timeout(timeout_s))
            except httpx.HTTPError as err:
                exc = err
            if (delay := loop.settle(base, resp, exc)) is not None:
                time.sleep(delay)
        return loop.outcome

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult:
        return _run_code_result(*self.request("POST", "/run_code", timeout_s=timeout_s, transient=_transient_answer,
                                              json=run_code_body(code, timeout_s, memory_limit_mb, stdin)))

    def ping(self) -> bool:
        resp, _ = self.request("GET", "/v1/ping", timeout_s=0.0)
        return resp is not None and resp.status_code == 200

    def session(self) -> HttpSession:
        resp, error = self.request("POST", "/sessions", timeout_s=SESSION_START_S, idempotent=False)
        return HttpSession.created(self, resp, error)

    def close(self) -> None:
        self._http.close()


class HttpSession:
    """One persistent interpreter on one endpoint (affinity); a CodeRunner whose calls share variables."""

    def __init__(self, client: SandboxClient, base_url: str, session_id: str, *, lost: str = ""):
        self.client, self.base_url, self.session_id, self.lost = client, base_url, session_id, lost

    @classmethod
    def created(cls, client, resp: httpx.Response | None, error: str):
        """The handle for POST /sessions' answer: a lost one (never raises) when it did not create a session."""
        if resp is None or resp.status_code != 200:
            why = error or f"HTTP {resp.status_code}: {resp.text[:200]}"
            return cls(client, "", "", lost=f"could not create a session: {why}")
        return cls(client, str(resp.request.url).rsplit("/sessions", 1)[0], resp.json()["session_id"])

    def _cell(self, code: str, timeout_s: float) -> dict:
        """`request` arguments of one cell: pinned to the session's endpoint, not idempotent."""
        return {"url": self.base_url, "json": {"code": code, "timeout": timeout_s}, "timeout_s": timeout_s,
                "idempotent": False}

    def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
            stdin: str = "") -> ExecutionResult:
        if self.lost:
            return lost_session(self.session_id, self.lost)
        return self._result(*self.client.request("POST", f"/sessions/{self.session_id}/execute",
                                                 **self._cell(code, timeout_s)))

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

    async def request(self, method: str, path: str, *, timeout_s: float, json=None, url: str | None = None,
                      idempotent: bool = True, transient=None) -> tuple[httpx.Response | None, str]:
        """`SandboxClient.request` with await: the same `RetryLoop`."""
        loop = self._loop(url, idempotent, transient)
        for base in loop:
            resp = exc = None
            try:
                async with self._slots:
                    resp = await self._http.request(method, base + path, json=json, timeout=self._timeout(timeout_s))
            except httpx.HTTPError as err:
                exc = err
            if (delay := loop.settle(base, resp, exc)) is not None:
                await asyncio.sleep(delay)
        return loop.outcome

    async def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
                  stdin: str = "") -> ExecutionResult:
        return _run_code_result(*await self.request("POST", "/run_code", timeout_s=timeout_s,
                                                    transient=_transient_answer,
                                                    json=run_code_body(code, timeout_s, memory_limit_mb, stdin)))

    async def session(self) -> AsyncHttpSession:
        resp, error = await self.request("POST", "/sessions", timeout_s=SESSION_START_S, idempotent=False)
        return AsyncHttpSession.created(self, resp, error)

    async def aclose(self) -> None:
        await self._http.aclose()


class AsyncHttpSession(HttpSession):
    async def run(self, code: str, *, timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = SERVER_DEFAULT_MEMORY,
                  stdin: str = "") -> ExecutionResult:
        if self.lost:
            return lost_session(self.session_id, self.lost)
        return self._result(*await self.client.request("POST", f"/sessions/{self.session_id}/execute",
                                                       **self._cell(code, timeout_s)))

    async def close(self) -> None:
        if self.session_id and not self.lost:
            await self.client.request("DELETE", f"/sessions/{self.session_id}", url=self.base_url, timeout_s=5.0)
        self.lost = self.lost or "closed"

    async def __aenter__(self) -> AsyncHttpSession:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
