"""`alprl-sandbox gateway`, the compose file's port publisher: a real server behind a real forwarder process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from sandbox.deploy.gateway import parse_address


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def gateway(server):
    port = int(server.url.rsplit(":", 1)[1])
    listen = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sandbox.deploy.cli", "gateway", "--listen", f"127.0.0.1:{listen}",
                             "--target", f"localhost:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    line = proc.stdout.readline()
    assert "gateway listening on 127.0.0.1" in line, line
    yield f"http://127.0.0.1:{listen}"
    proc.terminate()
    proc.wait(timeout=10)


def test_requests_through_the_gateway_reach_the_service(gateway):
    with httpx.Client(base_url=gateway, timeout=30.0) as http:
        assert http.get("/v1/ping").json() == "pong"
        big = "x" * 300_000  # more than one read chunk each way
        body = http.post("/run_code", json={"code": f"s = {big!r}\nprint(len(s), s[:3])", "language": "python"}).json()
        assert body["run_result"]["stdout"] == "300000 xxx\n"


def test_an_unreachable_target_closes_the_connection_and_the_gateway_lives_on(server):
    listen = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sandbox.deploy.cli", "gateway", "--listen", f"127.0.0.1:{listen}",
                             "--target", f"127.0.0.1:{_free_port()}"], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        for _ in range(2):
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{listen}/v1/ping", timeout=10.0)
        time.sleep(0.2)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("text", ["8080", "host:", ":80", "host:99999", "host:http"])
def test_bad_addresses_get_one_clear_error(text):
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address(text, what="--target")
    out = subprocess.run([sys.executable, "-m", "sandbox.deploy.cli", "gateway", "--target", text], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "expected HOST:PORT" in out.stderr and "Traceback" not in out.stderr
