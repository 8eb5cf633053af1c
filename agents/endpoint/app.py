"""The policy endpoint's routes: OpenAI's `/v1/chat/completions`, `/v1/completions`, `/v1/models`, and `/health`.

Thin: a route reads the JSON body, the `X-Episode-Id` header and the bearer API key, hands them to
`PolicyService` (agents/endpoint/service.py) and returns its answer; a refusal is OpenAI's error object with its
HTTP status. `stream=true` on chat completions answers server-sent events of the finished completion
(agents/endpoint/shapes.py `chat_chunks`); legacy completions do not stream.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agents.endpoint.service import PolicyService
from agents.endpoint.shapes import EndpointError, chat_chunks, model_list

EPISODE_HEADER = "X-Episode-Id"


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as err:
        raise EndpointError(400, f"the request body is not JSON: {err}", failure=None) from err
    if not isinstance(body, dict):
        raise EndpointError(400, "the request body must be a JSON object", failure=None)
    return body


def _api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _sse(chunks: list[dict[str, Any]]):
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def create_app(service: PolicyService) -> FastAPI:
    app = FastAPI(title="alprl policy endpoint", docs_url=None, redoc_url=None)

    @app.exception_handler(EndpointError)
    async def refused(_: Request, err: EndpointError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return model_list(service.s.model_name, service.max_model_len)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await _body(request)
        answer = await service.chat(body, request.headers.get(EPISODE_HEADER), _api_key(request))
        if body.get("stream"):
            return StreamingResponse(_sse(chat_chunks(answer)), media_type="text/event-stream")
        return answer

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _body(request)
        return await service.complete(body, request.headers.get(EPISODE_HEADER), _api_key(request))

    return app
