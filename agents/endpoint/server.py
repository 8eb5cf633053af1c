"""The policy endpoint served by uvicorn in a background thread, on a loopback port the OS picks (training) or the
one `alprl serve --port` names.

The socket is bound here, before the server starts, so the port is known at once and two endpoints never race
for one; `start` returns once uvicorn accepts connections, `close` stops it and joins its thread (bounded).
Loopback by default: the endpoint has no authentication, and the harness runs on this machine.
"""

from __future__ import annotations

import socket
import threading
import time

from agents.endpoint.service import PolicyService

START_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
"""How long `close` lets calls still in flight finish (a harness that timed out may have left one)."""


class EndpointServer:
    """`with EndpointServer(service) as server:` serves `server.base_url` (`http://127.0.0.1:<port>/v1`); `host`
    and `port` (0: the OS picks one) say where."""

    def __init__(self, service: PolicyService, host: str = "127.0.0.1", port: int = 0):
        import uvicorn  # the `sandbox` extra, as FastAPI: imported here, so importing the endpoint needs neither

        from agents.endpoint.app import create_app

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = host, self._sock.getsockname()[1]
        config = uvicorn.Config(create_app(service), log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30, timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="alprl-endpoint", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> EndpointServer:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the policy endpoint did not start on {self.host}:{self.port} within "
                                   f"{START_TIMEOUT_S:.0f} s")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=SHUTDOWN_TIMEOUT_S + 5)
        self._sock.close()

    def __enter__(self) -> EndpointServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
