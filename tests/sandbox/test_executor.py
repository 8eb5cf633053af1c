"""Executor core without HTTP: the in-process API (`execute`, `LocalExecutor`), result mapping, routing, recycling."""

from __future__ import annotations

import os

import pytest
from conftest import fresh_uid_base

from sandbox.execution.in_process import LocalExecutor, execute
from sandbox.execution.pool import Pool, RunRequest, limits_for, to_result
from sandbox.execution.protocol import RunReport
from sandbox.execution.supervision import Capture, RawRun
from sandbox.settings import Settings
from sandbox.types import CodeRunner, ExecutionResult


@pytest.fixture(scope="module")
def local():
    return LocalExecutor()


def test_local_executor_is_a_code_runner_and_runs_code(local):
    runner: CodeRunner = local  # the protocol the envs type against
    assert callable(runner.run) and callable(runner.close)
    r = local.run("print(6 * 7)")
    assert (r.status, r.stdout, r.return_code, r.ok) == ("Success", "42\n", 0, True)
    assert set(r.to_dict()) >= {"status", "stdout", "stderr", "return_code", "wall_time_s", "stdout_truncated",
                                "stderr_truncated", "killed_reason", "session_lost", "files"}
    local.close()  # idempotent no-op: the shared pool lives on
    assert local.run("print(1)").ok


@pytest.mark.parametrize("code, status, rc", [
    ("import sys; sys.exit(3)", "Failed", 3),
    ("raise ValueError('boom')", "Failed", 1),
    ("print(", "Failed", 1),
    ("print(1)\x00", "Failed", 1),  # NUL byte: the interpreter refuses the source
    ("import os; os.kill(os.getpid(), 9)", "Failed", -9),
])
def test_user_failures_are_failed_never_sandbox_error(local, code, status, rc):
    r = local.run(code)
    assert (r.status, r.return_code) == (status, rc)


def test_tracebacks_point_at_user_code_only(local):
    r = local.run("def f():\n    return 1 / 0\nf()")
    assert 'File "main.py", line 2, in f' in r.stderr and "sandbox" not in r.stderr
    assert r.stderr.strip().endswith("ZeroDivisionError: division by zero")


def test_timeout_stdin_and_output_cap(local):
    assert local.run("while True: pass", timeout_s=0.3).status == "TimeLimitExceeded"
    assert local.run("print(input()[::-1])", stdin="abc\n").stdout == "cba\n"
    capped = LocalExecutor(max_output_bytes=10).run("print('x' * 100)")
    assert capped.stdout == "x" * 10 and capped.stdout_truncated and capped.ok


def test_execute_function_keeps_its_signature():
    r = execute("import sys\nprint(sys.stdin.read())", timeout_s=2.0, memory_limit_mb=512, stdin="in",
                max_output_bytes=1024)
    assert r.stdout == "in\n"


def test_heavy_modules_route_to_the_preloaded_zygote(local):
    # The word "numpy" routes to the heavy zygote, where numpy is already imported before the snippet runs.
    assert local.run("import sys\nprint('numpy' in sys.modules)").stdout == "True\n"
    assert local.run("import sys\nprint(('num' + 'py') in sys.modules)").stdout == "False\n"
    assert local.run("import numpy as np\nprint(int(np.arange(5).sum()))").stdout == "10\n"
    assert local.run("import sympy\nprint(sympy.factor('x**2 - 1'))").stdout == "(x - 1)*(x + 1)\n"


RANDOM_STATE = ("import random, sys\n"
                "print(random.getrandbits(64), random.random(), random.gauss(0, 1), random.gauss(0, 1), "
                "('sym' + 'py') in sys.modules)")


@pytest.mark.parametrize("heavy", [False, True], ids=["light", "heavy"])
def test_every_run_gets_its_own_random_state(local, heavy):
    # The zygotes import `random` before forking and reseed it in each child from urandom (a C hook instead of
    # random.py's): no two runs may share a stream, and gauss works as in a fresh interpreter.
    code = ("# sympy\n" if heavy else "") + RANDOM_STATE
    rows = [local.run(code).stdout.split() for _ in range(12)]
    assert all(row[-1] == str(heavy) for row in rows)  # the comment routes to the heavy zygote
    for column in range(4):
        values = [row[column] for row in rows]
        assert len(set(values)) == len(values), f"column {column} repeats across runs: {values}"


def test_limits_are_clamped_to_the_server_maximum():
    s = Settings(max_run_timeout_s=5, default_memory_mb=256, max_memory_mb=512)
    lim = limits_for(s, RunRequest("x", timeout_s=100, memory_limit_mb=-1))
    assert (lim.timeout_s, lim.memory_mb, lim.cpu_s) == (5, 256, 6)
    assert limits_for(s, RunRequest("x", timeout_s=0.5, memory_limit_mb=10**6)).memory_mb == 512
    assert limits_for(s, RunRequest("x", memory_limit_mb=1)).memory_mb == 32


def _raw(report: RunReport, out: bytes = b"", err: bytes = b"") -> RawRun:
    o, e = Capture(100), Capture(100)
    o.feed(out)
    e.feed(err)
    return RawRun(report, o, e)


@pytest.mark.parametrize("report, expected", [
    (RunReport(0, 0.1), ("Success", 0, None)),
    (RunReport(2, 0.1), ("Failed", 2, None)),
    (RunReport(-11, 0.1), ("Failed", -11, None)),
    (RunReport(-9, 3.0, killed_reason="timeout"), ("TimeLimitExceeded", None, "timeout")),
    (RunReport(-9, 0.5, killed_reason="output"), ("Failed", -9, "output")),
    (RunReport(125, 0.0, setup_error="OSError: no space"), ("SandboxError", None, None)),
    (RunReport(-9, 0.1, killed_reason="server"), ("SandboxError", None, None)),
])
def test_reports_map_to_results(report, expected):
    r = to_result(_raw(report, b"out", b"err"))
    assert (r.status, r.return_code, r.killed_reason) == expected
    assert r.stdout == "out"


def test_capture_keeps_the_head_and_counts_the_rest():
    cap = Capture(5)
    for chunk in (b"abc", b"defg", b"hij"):
        cap.feed(chunk)
    assert (cap.text(), cap.total, cap.truncated) == ("abcde", 10, True)


def test_zygotes_are_recycled_after_max_runs():
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="", max_sessions=0,
                         zygote_max_runs=3), allow_unsafe=True)
    try:
        results = [pool.run(RunRequest(f"print({i})")) for i in range(8)]
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        assert pool.respawns >= 2
    finally:
        pool.close()


def test_a_heavy_zygote_killed_while_idle_is_replaced():
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="fractions",
                         heavy_triggers="fractions", max_sessions=0), allow_unsafe=True)
    routed = "import sys\nprint('fractions' in sys.modules)  # fractions"
    try:
        assert pool.run(RunRequest(routed)).stdout == "True\n"  # waits for the heavy zygote to start
        heavy = pool._slots[0].heavy
        heavy.proc.kill()
        heavy.proc.wait(timeout=10)
        assert pool.run(RunRequest(routed)).stdout == "True\n"  # a fresh heavy zygote, not the light one
        assert pool.respawns == 1 and pool._slots[0].heavy is not heavy and pool._slots[0].heavy.alive
    finally:
        pool.close()


def test_closed_pool_leaves_no_process_and_answers_sandbox_error():
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="", max_sessions=0),
                allow_unsafe=True)
    pids = pool.zygote_pids()
    assert pids
    pool.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert pool.run(RunRequest("print(1)")) == ExecutionResult("SandboxError", stderr="sandbox pool is closed")


@pytest.mark.parametrize("leave", [
    "open('extra.txt', 'w').write('x')",  # a file beside the program
    "os.makedirs('a/b/c'); open('a/b/c/d', 'w').write('x')",  # nested directories
    "os.unlink('main.py'); os.symlink('/etc/passwd', 'main.py')",  # the program replaced by a symlink
    "os.unlink('main.py')",  # the program gone
])
def test_the_next_run_on_a_slot_starts_in_an_empty_workdir(leave):
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="", max_sessions=0),
                allow_unsafe=True)
    try:
        assert pool.run(RunRequest(f"import os\n{leave}\nprint('left')")).stdout == "left\n"
        after = pool.run(RunRequest("import os\nprint(sorted(os.listdir('.')))"))
        assert after.stdout == "['main.py']\n", after
        assert os.path.exists("/etc/passwd")  # the symlink was removed, not what it pointed to
    finally:
        pool.close()


def test_a_light_run_forks_from_a_lean_interpreter_that_still_has_sites_builtins(local):
    # what every light run would copy page tables for and tear down at exit, though few runs use it
    lean = local.run("import sys\nprint(sorted(m for m in ('socket', 'dataclasses', 'inspect', 'shutil', 'base64', "
                     "'traceback', 'pathlib', 'ipaddress') if m in sys.modules))")
    assert lean.stdout == "[]\n", lean
    # started without `site` (-S), yet exit()/quit()/help() behave as under `python main.py`
    assert local.run("exit(3)").return_code == 3
    assert local.run("quit()").return_code == 0
    assert local.run("print(callable(help), str(copyright)[:9])").stdout == "True Copyright\n"
    assert local.run("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\nprint(P(2))").stdout == \
        "P(x=2)\n"
