"""Shutdown is quiet: a server that stops, or goes away, ends its zygotes without a traceback.

A zygote learns that its server is gone from its control socket. Linux reports a close as EOF, except when the
closing side still had a message of the zygote's unread (a "ready" or "exited" report): then it is
ECONNRESET. Both are a normal end; only genuine errors may print.
"""

from __future__ import annotations

import os
import pickle
import select

import httpx
import pytest
from conftest import fresh_uid_base

from sandbox.deploy.local_server import start_server
from sandbox.execution.pool import RunRequest, limits_for
from sandbox.execution.protocol import RunSpec, ZygoteConfig, send
from sandbox.execution.zygote_handle import ZygoteProcess
from sandbox.settings import Settings


def test_zygote_ends_quietly_when_its_server_leaves_a_report_unread(tmp_path, capfd):
    # No isolation layers: the property is about the control socket, and this way it holds for any user.
    zygote = ZygoteProcess(ZygoteConfig(slot=0, uid=None, layers=frozenset(), preload=(), tmpfs_mb=16,
                                        workdir_root=str(tmp_path)))
    payload_r, payload_w = os.pipe()
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    spec = RunSpec(limits=limits_for(Settings(), RunRequest("pass", timeout_s=10.0)))
    send(zygote.sock, "run", spec, fds=[payload_r, stdin_r, out_w, err_w])
    for fd in (payload_r, stdin_r, out_w, err_w, stdin_w):
        os.close(fd)
    os.write(payload_w, pickle.dumps(("pass", {})))
    os.close(payload_w)
    readable, _, _ = select.select([zygote.sock], [], [], 30.0)
    assert readable, "the zygote never reported the run's end"
    zygote.sock.close()  # as a server process that exits does: its "exited" report stays unread
    try:
        assert zygote.proc.wait(timeout=30) == 0
    finally:
        zygote.kill()
        os.close(out_r)
        os.close(err_r)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("use_it", [True, False], ids=["after-runs", "right-after-start"])
def test_service_stops_without_a_traceback(use_it):
    """Started and stopped as `alprl demo` does (`sandbox.deploy.local_server`: SIGTERM, the lifespan closes the pool).
    Stopped right after start, the heavy zygotes are still importing numpy and sympy (`/v1/info` counts them in
    `warming`): they report "ready" to a server that is exiting or gone, and must end quietly all the same."""
    with start_server(workers=2, max_sessions=2, uid_base=fresh_uid_base(), allow_unsafe=True) as server:
        if use_it:
            with httpx.Client(base_url=server.url, timeout=60.0) as http:
                for code in ("print(6 * 7)", "import numpy; print(numpy.arange(3).sum())"):
                    answer = http.post("/run_code", json={"code": code, "language": "python"}).json()
                    assert answer["status"] == "Success", answer
                session = http.post("/sessions").json()["session_id"]
                cell = http.post(f"/sessions/{session}/execute", json={"code": "x = 1"}).json()
                assert (cell["status"], cell["return_code"]) == ("Finished", 0), cell
    # The output pipe closes once the server and every zygote (they inherit its stderr) have exited.
    assert server.wait_output_closed(timeout_s=60.0), "a zygote outlived its server"
    output = server.output_tail()
    assert "Traceback" not in output, output
