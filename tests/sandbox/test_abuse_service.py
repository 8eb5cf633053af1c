"""Abuse matrix, attacks on the service itself and hostile requests (reference/sandbox.md §7)."""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest


@pytest.mark.parametrize("code", [
    "import os\nos.kill(os.getppid(), 9)",
    "import os\nos.killpg(0, 9)",
    "import os\nos.kill(-1, 9)",
    "import ctypes, os\nctypes.CDLL(None).kill(os.getppid(), 9)\nctypes.CDLL(None).kill(1, 9)",
], ids=["kill-parent", "killpg-0", "kill-minus-1", "ctypes-kill"])
def test_killing_parents_does_not_touch_the_service(contained, code):
    before = contained.info()["zygote_pids"]
    body = contained.run(code)
    assert body["status"] in ("Success", "Failed")  # never SandboxError: the worker survived
    assert contained.info()["zygote_pids"] == before
    assert contained.run("print('still here')")["run_result"]["stdout"] == "still here\n"


def test_ptrace_attach_to_parent_fails(contained):
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())")  # 16 = PTRACE_ATTACH
    rc, errno_ = contained.run(code)["run_result"]["stdout"].split()
    assert rc == "-1" and int(errno_) in (1, 3)  # EPERM or ESRCH


@pytest.mark.parametrize("body, status", [
    (b"{not json", 422),
    (json.dumps({"code": "print(1)", "language": "cobol"}).encode(), 422),
    (json.dumps({"code": "print(1)"}).encode(), 422),
    (json.dumps({"code": "x" * ((1 << 20) + 1), "language": "python"}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "files": {"../escape.txt": "aGk="}}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "files": {"/proc/1/x": "aGk="}}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "files": {"/etc/../root/x": "aGk="}}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "files": {"a.txt": "not base64!"}}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "fetch_files": ["../../etc/passwd"]}).encode(), 422),
    (json.dumps({"code": "1", "language": "python", "run_timeout": -1}).encode(), 422),
], ids=["malformed-json", "unknown-language", "no-language", "code-over-1MiB", "dotdot-path", "absolute-proc",
        "absolute-dotdot", "bad-base64", "fetch-dotdot", "negative-timeout"])
def test_bad_requests_get_4xx(contained, body, status):
    resp = contained.http.post("/run_code", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == status, resp.text


def test_oversized_body_is_refused_before_reading(contained):
    host, port = contained.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # raw: clients refuse a lying length
        sock.sendall(f"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {100 << 20}\r\n\r\n{{}}".encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"413"


def test_known_but_unsupported_language_is_a_sandbox_error(contained):
    body = contained.http.post("/run_code", json={"code": "int main(){}", "language": "cpp"}).json()
    assert body["status"] == "SandboxError" and "unsupported language" in body["message"]


@pytest.mark.parametrize("stdin, expected", [(None, "0"), ("", "0"), ("ab\n" * (10 << 18), str(30 << 18))],
                         ids=["null", "empty", "10MiB"])
def test_stdin_variants(contained, stdin, expected):
    body = contained.run("import sys\nprint(len(sys.stdin.read()))", stdin=stdin, run_timeout=10)
    assert body["run_result"]["stdout"].strip() == expected


def test_unicode_source_and_output(contained):
    body = contained.run("s = 'héllo ✓ 数学 🙂'\nprint(s, len(s))")
    assert body["run_result"]["stdout"] == "héllo ✓ 数学 🙂 12\n"


def test_files_are_written_in_the_workdir_and_fetch_is_confined(contained):
    code = ("import os\ndata = open('in/data.txt').read()\nopen('out.txt', 'w').write(data.upper())\n"
            "os.symlink('/etc/passwd', 'link.txt')\nos.symlink('/etc', 'etcdir')")
    body = contained.run(code, files={"in/data.txt": base64.b64encode(b"abc").decode(), "skip.txt": None},
                         fetch_files=["out.txt", "missing.txt", "link.txt", "etcdir/passwd"])
    assert body["status"] == "Success", body
    assert body["files"] == {"out.txt": base64.b64encode(b"ABC").decode()}


def test_session_keeps_variables_and_a_timeout_ends_it(contained):
    sid = contained.http.post("/sessions").json()["session_id"]
    ex = f"/sessions/{sid}/execute"
    assert contained.http.post(ex, json={"code": "import math\nx = 6"}).json()["status"] == "Finished"
    cell = contained.http.post(ex, json={"code": "print(x * 7, math.pi > 3)"}).json()
    assert cell["stdout"] == "42 True\n" and cell["session_lost"] is False
    err = contained.http.post(ex, json={"code": "1/0"}).json()
    assert err["return_code"] == 1 and "ZeroDivisionError" in err["stderr"] and "1/0" in err["stderr"]
    lost = contained.http.post(ex, json={"code": "while True: pass", "timeout": 0.5}).json()
    assert lost["status"] == "TimeLimitExceeded" and lost["session_lost"] is True
    assert contained.http.post(ex, json={"code": "print(x)"}).status_code == 404


def test_session_interpreter_crash_is_reported_lost(contained):
    sid = contained.http.post("/sessions").json()["session_id"]
    cell = contained.http.post(f"/sessions/{sid}/execute", json={"code": "import os\nos._exit(3)"}).json()
    assert cell["session_lost"] is True and cell["return_code"] == 3
    assert contained.http.delete(f"/sessions/{sid}").status_code == 404


def test_session_cap_answers_429_and_delete_frees_a_place(contained):
    cap = contained.info()["sessions"]["max"]
    ids = [contained.http.post("/sessions").json()["session_id"] for _ in range(cap)]
    full = contained.http.post("/sessions")
    assert full.status_code == 429 and "Retry-After" in full.headers
    assert contained.http.delete(f"/sessions/{ids[0]}").json() == {"deleted": True}
    ids[0] = contained.http.post("/sessions").json()["session_id"]
    for sid in ids:
        assert contained.http.delete(f"/sessions/{sid}").status_code == 200


def test_healthz_info_and_metrics(server):
    health = server.info()
    assert health["status"] == "ok" and health["tier"] in ("T0", "T1", "T2") and "layers" in health
    info = server.http.get("/v1/info").json()
    assert info["workers"] == 2 and info["backend"] == "process" and "queue_depth" in info
    assert 0 <= info["warming"] <= info["workers"]  # heavy zygotes still importing in the background
    deadline = time.monotonic() + 120
    while info["warming"] and time.monotonic() < deadline:
        time.sleep(0.2)
        info = server.http.get("/v1/info").json()
    assert info["warming"] == 0
    text = server.http.get("/metrics").text
    for family in ("sandbox_requests_total", "sandbox_request_seconds_bucket", "sandbox_queue_depth",
                   "sandbox_executions_total", "sandbox_kills_total"):
        assert family in text
    assert server.http.get("/get_prompts").status_code == 404  # SandboxFusion dataset routes: not implemented
