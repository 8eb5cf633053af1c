"""The client room: how environments and trainers reach a sandbox. `make_runner(url)` returns a CodeRunner.

- ``url=None`` / ``""``: the in-process `sandbox.execution.in_process.LocalExecutor` (warm zygote pool in this
  process; no server). This room does not import the execution room at module level: a process that only talks
  HTTP (an env given a URL, a trainer whose sandbox is a service) never loads the zygote, seccomp and pool
  modules; `make_runner(None)` loads them when it builds the local runner.
- ``url="http://host:8080"`` or ``"http://a:8080,http://b:8080"``: `SandboxClient`, the HTTP client (httpx).
The env only sees the CodeRunner protocol (`run(code, *, timeout_s, memory_limit_mb, stdin)`, `close()`; defaults
`sandbox.settings.RUN_TIMEOUT_S` and -1, the server's `default_memory_mb`), so switching paths never changes env code. `AsyncSandboxClient` is the asyncio twin with the same methods.

Behaviour: endpoints are used round-robin; one that refuses connections is skipped for 5 s. Connection errors,
429, 5xx and SandboxError answers are retried with jittered exponential backoff (honouring Retry-After), each
try on the next live endpoint, for 5 tries or, with `RetryPolicy.budget_s` (`make_runner(url, retry_s=...)`, the
config's `env.sandbox_retry_s`), for that many seconds; Failed / TimeLimitExceeded results are answers (the
program's own outcome) and never retried. At most `max_in_flight` requests per client are
in flight. Nothing raises for sandbox trouble: after the last retry the result is ``status="SandboxError"``.
Stateless runs go through SandboxFusion's ``POST /run_code``, so this client also works against SandboxFusion.
The retry loop is one (`retry.RetryLoop`), driven by the sync and the async client alike.

API key: a server started with ``SANDBOX_API_KEY`` (`sandbox.service.auth`) wants ``Authorization: Bearer <key>``; the
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

Modules: `http_client` (the clients and their sessions), `retry` (endpoints, policy, the retry loop), `wire`
(SandboxFusion's body and answers ↔ ExecutionResult).
"""

from __future__ import annotations

from sandbox.client.http_client import (
    AsyncHttpSession,
    AsyncSandboxClient,
    HttpSession,
    SandboxAuthError,
    SandboxClient,
)
from sandbox.client.retry import RetryPolicy
from sandbox.types import CodeRunner, ExecutionResult

__all__ = ["AsyncHttpSession", "AsyncSandboxClient", "CodeRunner", "ExecutionResult", "HttpSession", "RetryPolicy",
           "SandboxAuthError", "SandboxClient", "make_runner"]


def make_runner(url: str | None = None, *, retry_s: float | None = None) -> CodeRunner:
    """None/"" → in-process LocalExecutor; one URL or a comma-separated list → SandboxClient.

    retry_s: the client's retry budget per call (`RetryPolicy.budget_s`; None: its 5 tries); the local path ignores it.
    """
    if not url:
        # Imported here, not at the top: HTTP-only processes must not load the executor (see the docstring).
        from sandbox.execution.in_process import LocalExecutor

        return LocalExecutor()
    return SandboxClient(url, retry=None if retry_s is None else RetryPolicy(budget_s=retry_s))
