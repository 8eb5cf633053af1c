"""The `sandbox-fusion` PyPI client (0.3.7), unchanged, against our server; and verl's raw request shape."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import httpx
import pytest

sandbox_fusion = pytest.importorskip("sandbox_fusion", reason="pip install sandbox-fusion (dev extra)")
from sandbox_fusion import RunCodeRequest, RunStatus, run_code, run_code_async  # noqa: E402


def test_run_code_success_and_failure(server):
    ok = run_code(RunCodeRequest(code="print(6 * 7)", language="python"), endpoint=server.url)
    assert ok.status == RunStatus.Success and ok.run_result.stdout == "42\n"
    assert ok.run_result.return_code == 0 and ok.compile_result is None
    failed = run_code(RunCodeRequest(code="import sys\nsys.exit(3)", language="python"), endpoint=server.url)
    assert failed.status == RunStatus.Failed and failed.run_result.return_code == 3


def test_run_code_time_limit(server):
    res = run_code(RunCodeRequest(code="while True: pass", language="python", run_timeout=0.5), endpoint=server.url)
    assert res.status == RunStatus.Failed
    assert res.run_result.status == "TimeLimitExceeded" and res.run_result.return_code is None


def test_run_code_files_and_stdin(server):
    req = RunCodeRequest(code="import sys\nopen('o.txt', 'w').write(open('i.txt').read() + sys.stdin.read())",
                         language="python", stdin="+in", files={"i.txt": base64.b64encode(b"file").decode()},
                         fetch_files=["o.txt"])
    res = run_code(req, endpoint=server.url)
    assert res.status == RunStatus.Success and base64.b64decode(res.files["o.txt"]) == b"file+in"


def test_sandbox_error_makes_the_official_client_raise(server):
    with pytest.raises(Exception, match="SandboxError|unsupported"):
        run_code(RunCodeRequest(code="int main() {}", language="cpp"), endpoint=server.url, max_attempts=1)


def test_async_client(server):
    res = asyncio.run(run_code_async(RunCodeRequest(code="print('async')", language="python"), endpoint=server.url))
    assert res.run_result.stdout == "async\n"


def test_verl_reward_path_request_shape(server):
    # verl utils/reward_score/sandbox_fusion: URL ends in /run_code, JSON headers, these exact body fields.
    body = {"compile_timeout": 10, "run_timeout": 3, "code": "print(input())", "stdin": "7", "memory_limit_MB": 1024,
            "language": "python", "files": {}, "fetch_files": []}
    resp = httpx.post(f"{server.url}/run_code", json=body, timeout=20,
                      headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert resp.status_code == 200
    assert resp.json()["run_result"]["stdout"].rstrip("\n") == "7"


# ---- SandboxFusion parity (issue 21 item 3): cases SandboxFusion's own python runner tests cover ------------------
OUR_PATHS = ("sandbox/execution/zygote.py", "sandbox/execution/child.py", "sandbox/isolation/linux.py")


def _clean_stderr(res: dict) -> None:
    assert not any(p in res["run_result"]["stderr"] for p in OUR_PATHS), res["run_result"]["stderr"]


@pytest.mark.parametrize("header", ["import os\nos._exit = None", "import sys\nsys.exit = None",
                                    "import os, sys\nos._exit = None\nsys.exit = None\nos.kill = None"])
def test_python_antihack_header_keeps_success(server, header):
    # The header some pipelines prepend to every solution (SandboxFusion runs such code as a plain script).
    res = server.run(f"{header}\nprint('still here')")
    assert res["status"] == "Success", res
    assert res["run_result"]["stdout"] == "still here\n" and res["run_result"]["return_code"] == 0
    _clean_stderr(res)


def test_python_antihack_header_then_error_reports_only_user_traceback(server):
    res = server.run("import os, sys\nos._exit = None\nsys.exit = None\nraise ValueError('boom')")
    assert res["status"] == "Failed" and res["run_result"]["return_code"] == 1
    assert "ValueError: boom" in res["run_result"]["stderr"]
    _clean_stderr(res)


def test_python_sys_exit_code_kept_after_os_exit_patched(server):
    # SandboxFusion: a non-zero return code is Failed and keeps the code.
    res = server.run("import os, sys\nos._exit = None\nprint('x')\nsys.exit(3)")
    assert res["status"] == "Failed" and res["run_result"]["return_code"] == 3
    assert res["run_result"]["stdout"] == "x\n"
    _clean_stderr(res)


def test_python_replaced_write_close_print_stdout_still_captured(server):
    code = ("import builtins, os, sys\nsys.stdout.write('before\\n')\nos.write = lambda *a: 0\n"
            "os.close = lambda *a: None\nos.read = None\nbuiltins.print = lambda *a, **k: None\n"
            "builtins.isinstance = None\nbuiltins.BaseException = None\nprint('hidden')\n"
            "sys.stdout.write('after\\n')\nsys.stdout = None\nsys.stderr = None\nsys.__stdout__ = None")
    res = server.run(code)
    assert res["status"] == "Success", res
    assert res["run_result"]["stdout"] == "before\nafter\n" and res["run_result"]["return_code"] == 0
    _clean_stderr(res)


def test_session_cell_with_antihack_header_keeps_the_session(server):
    sid = server.http.post("/sessions").json()["session_id"]
    try:
        first = server.http.post(f"/sessions/{sid}/execute",
                                 json={"code": "import os, sys\nos._exit = None\nos.write = None\nsys.exit = None\n"
                                               "print('a')"}).json()
        second = server.http.post(f"/sessions/{sid}/execute", json={"code": "print('b')"}).json()
        assert first["stdout"] == "a\n" and second["stdout"] == "b\n" and not second["session_lost"]
    finally:
        server.http.delete(f"/sessions/{sid}")


def _needs(server, layer: str) -> None:
    if layer not in server.info()["layers"]:
        pytest.skip(f"no {layer!r} layer on this machine ({server.info()['layer_errors'].get(layer, 'not active')})")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_python_loopback_server_in_private_netns(server, host):
    _needs(server, "net")
    code = f"""
import socket, threading
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
def echo():
    conn, _ = srv.accept(); conn.sendall(conn.recv(100).upper()); conn.close()
threading.Thread(target=echo).start()
c = socket.create_connection(({host!r}, srv.getsockname()[1]), timeout=2)
c.sendall(b"ping"); print(c.recv(100).decode())
"""
    res = server.run(code)
    assert res["status"] == "Success", res
    assert res["run_result"]["stdout"] == "PING\n"


@pytest.mark.parametrize("target", ["('1.1.1.1', 80)", "('127.0.0.1', PORT)"])
def test_python_no_route_out_of_private_netns(server, target):
    # Outside addresses are unreachable, and 127.0.0.1 is the run's own loopback: the server's port is not there.
    _needs(server, "net")
    port = int(server.url.rsplit(":", 1)[1])
    code = (f"import socket\nPORT = {port}\ntry:\n    socket.create_connection({target}, timeout=1)\n"
            "    print('connected')\nexcept OSError as exc:\n    print('refused', type(exc).__name__)")
    res = server.run(code)
    assert res["status"] == "Success" and res["run_result"]["stdout"].startswith("refused"), res


def test_run_code_absolute_path_files_and_fetch(contained):
    server = contained
    # SandboxFusion maps absolute `files` / `fetch_files` into the run and gives them back.
    _needs(server, "mount")
    data = bytes(range(256))
    before = os.listdir("/mnt") if os.path.isdir("/mnt") else None
    req = RunCodeRequest(code="d = open('/mnt/b', 'rb').read()\nopen('/mnt/c', 'wb').write(d[::-1])\n"
                              "import os\nos.makedirs('/tmp/x', exist_ok=True)\nopen('/tmp/x/y.txt', 'w').write('y')\n"
                              "open('/tmp/z.txt', 'w').write(open('/tmp/in.txt').read())",
                         language="python", files={"/mnt/b": base64.b64encode(data).decode(),
                                                    "/tmp/in.txt": base64.b64encode(b"z").decode()},
                         fetch_files=["/mnt/b", "/mnt/c", "/tmp/x/y.txt", "/tmp/z.txt"])
    res = run_code(req, endpoint=server.url, max_attempts=1)
    assert res.status == RunStatus.Success, res
    assert base64.b64decode(res.files["/mnt/b"]) == data and base64.b64decode(res.files["/mnt/c"]) == data[::-1]
    assert base64.b64decode(res.files["/tmp/x/y.txt"]) == b"y" and base64.b64decode(res.files["/tmp/z.txt"]) == b"z"
    after = os.listdir("/mnt") if os.path.isdir("/mnt") else None
    assert before == after and not os.path.exists("/mnt/b") and not os.path.exists("/tmp/x/y.txt")


def test_run_code_absolute_path_is_private_to_the_run(server):
    _needs(server, "mount")
    one = base64.b64encode(b"1").decode()
    first = server.run("x = 1", files={"/mnt/b": one, "/tmp/a": one})
    assert first["status"] == "Success", first
    res = server.run("import os\nprint(os.path.exists('/mnt/b'), os.path.exists('/tmp/a'))")
    assert res["run_result"]["stdout"] == "False False\n"


@pytest.mark.parametrize("path", ["/mnt/../etc/passwd", "/mnt/./b", "//b", "/b", "/proc/self/b", "../b", "/mnt//b"])
def test_run_code_traversal_paths_refused(server, path):
    for field in ({"files": {path: base64.b64encode(b"x").decode()}}, {"fetch_files": [path]}):
        resp = server.http.post("/run_code", json={"code": "pass", "language": "python", **field})
        assert resp.status_code == 422, resp.text
        assert "must be without '..'" in resp.text or "must name a file" in resp.text


def test_run_code_absolute_path_over_sandbox_files_refused(server):
    # Covering the interpreter's or the sandbox's own directories would break the run: a clear SandboxError.
    _needs(server, "mount")
    for path in (f"{sys.prefix}/lib/x.txt", "/tmp/.alprl/other/x.txt", f"{os.path.realpath(sys.executable)}/x"):
        res = server.run("pass", files={path: base64.b64encode(b"x").decode()})
        assert res["status"] == "SandboxError" and "sandbox's own files" in res["message"], (path, res)


def test_run_code_absolute_path_never_reaches_the_host(contained):
    # What used to be the "absolute path" abuse case: with a private mount tree it lands in the run's own view only.
    _needs(contained, "mount")
    res = contained.run("print(open('/etc/cron.d/alprl-x').read())",
                        files={"/etc/cron.d/alprl-x": base64.b64encode(b"* * * * * root true").decode()})
    assert res["status"] == "Success" and res["run_result"]["stdout"] == "* * * * * root true\n", res
    assert not os.path.exists("/etc/cron.d/alprl-x")


def test_absolute_paths_without_a_mount_layer_get_a_clear_422():
    # Docker backend, or a machine without namespaces: nothing to map the path into, so refuse it up front.
    from types import SimpleNamespace

    from fastapi import HTTPException

    from sandbox.isolation.file_paths import check_absolute
    from sandbox.service.routes import _run_request
    from sandbox.settings import Settings

    service = SimpleNamespace(settings=Settings(), backend=SimpleNamespace(info=lambda: {"layers": ["net", "pid"]}))
    with pytest.raises(HTTPException) as err:
        _run_request(service, "pass", 1.0, -1, "", {}, ["/mnt/b"])
    assert err.value.status_code == 422 and "no private mount layer" in err.value.detail
    assert _run_request(service, "pass", 1.0, -1, "", {}, ["b"]).fetch_files == ("b",)
    with pytest.raises(ValueError, match="mount layer"):  # the child refuses too (defence in depth)
        check_absolute(["/mnt/b"], None)
