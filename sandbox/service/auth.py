"""Who may run code, and how much of the service one caller may hold: an ASGI middleware before every route.

- **API key** (`SANDBOX_API_KEY`, one key or a comma-separated list, one per caller): when set, every route but
  ``GET /v1/ping`` (health checks, the client's reachability probe) answers 401 + ``WWW-Authenticate: Bearer``
  unless the request carries ``Authorization: Bearer <key>``. ``Authorization: Basic`` whose password is a key
  is accepted too: that is what `requests`, `aiohttp` and `httpx` send for a URL such as
  ``http://alprl:<key>@host:8080``, the only way the `sandbox-fusion` client and verl's reward path (which pass
  no headers of their own) can carry a key. Keys are compared with `hmac.compare_digest` against every
  configured key, so the time taken does not tell which prefix matched. The check runs before the body is read:
  a refused request runs nothing.
- **Per-client cap** (`SANDBOX_MAX_INFLIGHT_PER_CLIENT`, 0 = off): at most that many run requests
  (``/run_code``, ``/execute``, ``/sessions/{id}/execute``) of one client in flight at once, queued or running.
  A client is its key when keys are set, else its address (behind a proxy or the compose `sandbox-gateway`
  every caller shares the proxy's address, so the cap then bounds them together). Over the cap the answer is
  the overload status of `sandbox.service.admission` (429 by default, `SANDBOX_OVERLOAD_STATUS`) with Retry-After,
  before the request reaches the global `Gate`, so one caller cannot fill the shared queue.

The key guards the port against other network callers, not against the code it runs: user code that shares the
server's uid (T0, `ALPRL_SANDBOX_ALLOW_UNSAFE=1`, the compose default) can read the server's environment.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.responses import JSONResponse

from sandbox.settings import Settings

OPEN_PATHS = frozenset({"/v1/ping"})
RUN_PATHS = frozenset({"/run_code", "/execute"})


def parse_keys(raw: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in raw.split(",") if k.strip())


def presented_key(authorization: str) -> str:
    """The key in an Authorization header value: the Bearer token, or a Basic credential's password."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return ""
    return ""


def key_index(presented: str, keys: tuple[str, ...]) -> int | None:
    """Index of the matching key, or None; every key is compared (constant time each), whatever matched."""
    found = None
    given = presented.encode()
    for i, key in enumerate(keys):
        if hmac.compare_digest(given, key.encode()) and found is None:
            found = i
    return found


def is_run(method: str, path: str) -> bool:
    return method == "POST" and (path in RUN_PATHS or (path.startswith("/sessions/") and path.endswith("/execute")))


class Access:
    """The policy and its counters, shared by the middleware, `/v1/info` and `/metrics`."""

    def __init__(self, settings: Settings):
        self.keys = parse_keys(settings.api_key)
        self.cap = settings.max_inflight_per_client
        self.status, self.retry_after_s = settings.overload_status, settings.retry_after_s
        self.in_flight: dict[str, int] = {}
        self.unauthorized = 0
        self.limited = 0

    def info(self) -> dict:
        """What `/v1/info` reports: whether a key is needed (never the key) and the per-client cap."""
        return {"auth": bool(self.keys), "max_inflight_per_client": self.cap}


class AccessMiddleware:
    """401 without a valid key (when keys are set); per-client in-flight cap on run routes (when > 0)."""

    def __init__(self, app, access: Access):
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        a = self.access
        client = (scope.get("client") or ("?", 0))[0]
        if a.keys:
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            index = key_index(presented_key(header), a.keys)
            if index is None:
                a.unauthorized += 1
                response = JSONResponse({"detail": "missing or wrong API key: this sandbox needs 'Authorization: "
                                         "Bearer <key>' (the value of its SANDBOX_API_KEY)"}, 401,
                                        headers={"WWW-Authenticate": 'Bearer realm="alprl-sandbox"'})
                return await response(scope, receive, send)
            client = f"key#{index}"
        if not a.cap or not is_run(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)
        if a.in_flight.get(client, 0) >= a.cap:
            a.limited += 1
            response = JSONResponse({"detail": f"sandbox overloaded: this client already has {a.cap} runs in "
                                     "flight (SANDBOX_MAX_INFLIGHT_PER_CLIENT)"}, a.status,
                                    headers={"Retry-After": str(a.retry_after_s)})
            return await response(scope, receive, send)
        a.in_flight[client] = a.in_flight.get(client, 0) + 1
        try:
            return await self.app(scope, receive, send)
        finally:
            a.in_flight[client] -= 1
            if not a.in_flight[client]:
                del a.in_flight[client]
