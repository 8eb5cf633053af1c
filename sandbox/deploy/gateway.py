"""A TCP forwarder that publishes the sandbox service from an internal Docker network.

The `sandbox` container sits only on an `internal: true` network (no route out for user code), and Docker cannot
publish a port of such a container. The gateway joins that network and an ordinary one and copies bytes both ways.
It runs from the sandbox image itself, so nothing has to be pulled from a registry. The target name is resolved
anew for every connection, so Docker's DNS spreads connections over `sandbox` replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

log = logging.getLogger("sandbox.deploy.gateway")
CHUNK = 64 * 1024


def parse_address(text: str, *, what: str) -> tuple[str, int]:
    """'host:port' → (host, port); one clear error otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {text!r}: expected HOST:PORT, e.g. 0.0.0.0:8080 or sandbox:8080")
    return host.strip("[]"), int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()  # half-close: the other direction may still be sending


async def _forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, target: tuple[str, int],
                   connect_timeout_s: float) -> None:
    try:
        upstream_r, upstream_w = await asyncio.wait_for(asyncio.open_connection(*target), connect_timeout_s)
    except (TimeoutError, OSError) as exc:
        log.warning("gateway: cannot reach %s:%d: %s", *target, exc)
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        for w in (upstream_w, client_w):
            with contextlib.suppress(OSError, RuntimeError):
                w.close()


async def run_gateway(listen: tuple[str, int], target: tuple[str, int], *, connect_timeout_s: float = 10.0,
                      ready: asyncio.Event | None = None) -> None:
    """Accept on `listen` and forward every connection to `target` until cancelled."""
    server = await asyncio.start_server(
        lambda r, w: _forward(r, w, target, connect_timeout_s), *listen, reuse_address=True, backlog=2048,
        family=socket.AF_INET6 if ":" in listen[0] else socket.AF_INET)
    bound = server.sockets[0].getsockname()
    print(f"alprl-sandbox gateway listening on {bound[0]}:{bound[1]} → {target[0]}:{target[1]}", flush=True)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()
