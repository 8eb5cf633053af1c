"""FastAPI application factory: wires settings → service → routes; nothing else lives here.

`create_app(settings)` starts the worker pool in the lifespan (so importing this module is free) and adds two
ASGI middlewares: request metrics with a body-size cap answered with 413 before the body is read (outer), and
the API key and per-client cap of `sandbox.service.auth` (inner, so its 401/429 answers are counted too).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from sandbox.service.admission import Overloaded
from sandbox.service.auth import Access, AccessMiddleware
from sandbox.service.metrics import Metrics, route_label
from sandbox.service.routes import router
from sandbox.service.sandbox_service import VERSION, SandboxService
from sandbox.settings import Settings

MAX_BODY_BYTES = 48 << 20  # code 1 MiB + files 10 MiB as base64 + stdin 16 MiB, with room for JSON escaping


class ObserveMiddleware:
    """Counts requests and latency per route; rejects oversized bodies (by Content-Length) with 413."""

    def __init__(self, app, metrics: Metrics, max_body_bytes: int = MAX_BODY_BYTES):
        self.app, self.metrics, self.max_body_bytes = app, metrics, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [500]

        async def observed_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            length = dict(scope["headers"]).get(b"content-length", b"0")
            if length.isdigit() and int(length) > self.max_body_bytes:
                response = JSONResponse({"detail": f"request body larger than {self.max_body_bytes} bytes"}, 413)
                return await response(scope, receive, observed_send)
            return await self.app(scope, receive, observed_send)
        finally:
            self.metrics.observe_request(route_label(scope["path"]), status[0], time.perf_counter() - start)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    metrics = Metrics()
    access = Access(settings)
    metrics.gauge("sandbox_unauthorized_total", "requests refused for a missing or wrong API key",
                  lambda: access.unauthorized)
    metrics.gauge("sandbox_client_limited_total", "run requests refused by the per-client in-flight cap",
                  lambda: access.limited)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Starting zygotes blocks for a moment; keep the loop free meanwhile.
        app.state.sandbox = await asyncio.to_thread(SandboxService, settings, metrics)
        try:
            yield
        finally:
            await asyncio.to_thread(app.state.sandbox.close)

    app = FastAPI(title="alprl sandbox", version=VERSION, lifespan=lifespan,
                  description="SandboxFusion-compatible Python execution service (see docs/sandbox.md)")
    app.state.access = access
    app.include_router(router)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return JSONResponse({"detail": f"sandbox overloaded: {exc}"}, status_code=settings.overload_status,
                            headers={"Retry-After": str(exc.retry_after_s)})

    app.add_middleware(AccessMiddleware, access=access)
    app.add_middleware(ObserveMiddleware, metrics=metrics)  # added last = outermost
    return app
