"""The `sandbox-fusion` PyPI client (0.3.7), unchanged, against our server; and verl's raw request shape."""

from __future__ import annotations

import asyncio
import base64

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
