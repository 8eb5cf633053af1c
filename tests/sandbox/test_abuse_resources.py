"""Abuse matrix, resources (reference/sandbox.md §7): each test attacks one property through a real server.

Every test asserts the expected status and, through the `contained` fixture, that /v1/ping still answers, no
process of the run survives and nothing the run wrote is left. Time bounds are generous kill checks (a run
that was not killed would take 1e6 s), not speed measurements.
"""

from __future__ import annotations

import pytest

LIMIT = 1.0  # run_timeout for attacks that must be cut by the wall clock


def run_status(body: dict) -> tuple[str, str | None, int | None]:
    rr = body["run_result"] or {}
    return body["status"], rr.get("status"), rr.get("return_code")


def assert_time_limit(body: dict) -> None:
    assert body["status"] == "Failed", body
    rr = body["run_result"]
    assert rr["status"] == "TimeLimitExceeded" and rr["return_code"] is None
    assert rr["execution_time"] < LIMIT + 5.0


def test_fork_bomb_is_contained(contained):
    body = contained.run("import os\nwhile True:\n    os.fork()", run_timeout=LIMIT)
    status, run, _ = run_status(body)
    assert status == "Failed" and run in ("Finished", "TimeLimitExceeded")


def test_multiprocessing_pool_of_1000_is_contained(contained):
    body = contained.run("import multiprocessing as mp\nwith mp.Pool(1000) as p:\n    print(sum(p.map(abs, range(10))))",
                         run_timeout=LIMIT)
    assert body["status"] == "Failed", body


@pytest.mark.parametrize("code", ["x = bytearray(10**10)", "x = 'a' * 10**10"], ids=["bytearray", "str"])
def test_memory_bomb_raises_memory_error(contained, code):
    body = contained.run(code)
    status, run, rc = run_status(body)
    assert (status, run, rc) == ("Failed", "Finished", 1)
    assert "MemoryError" in body["run_result"]["stderr"]


def test_slow_memory_growth_hits_the_limit(contained):
    body = contained.run("x = []\nwhile True:\n    x.append(' ' * 10**6)", memory_limit_MB=256, run_timeout=5)
    status, run, rc = run_status(body)
    assert status == "Failed" and run == "Finished" and rc in (1, -9)


@pytest.mark.parametrize("code", ["while True: pass", "import time; time.sleep(1e6)"], ids=["busy", "sleep"])
def test_endless_run_hits_time_limit(contained, code):
    assert_time_limit(contained.run(code, run_timeout=LIMIT))


def test_non_daemon_thread_after_main_returns(contained):
    code = "import threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin).start()\nprint('main done')"
    body = contained.run(code, run_timeout=LIMIT)
    assert_time_limit(body)
    assert body["run_result"]["stdout"] == "main done\n"  # partial output survives the kill


def test_gil_holding_regex_is_killed(contained):
    assert_time_limit(contained.run("import re\nre.match('(a+)+$', 'a' * 40 + 'b')", run_timeout=LIMIT))


def test_ignoring_sigterm_does_not_help(contained):
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass"
    assert_time_limit(contained.run(code, run_timeout=LIMIT))


def test_double_forked_daemon_does_not_survive(contained):
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "    os._exit(0)\nprint('parent exits')")
    body = contained.run(code)
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "parent exits\n"


def test_unreaped_zombies_are_reaped(contained):
    code = "import os\nfor _ in range(20):\n    if os.fork() == 0:\n        os._exit(0)\nprint('left zombies')"
    assert contained.run(code)["status"] == "Success"


def test_output_flood_is_capped_and_killed(contained):
    body = contained.run("while True: print('x' * 10**6)", run_timeout=10)
    rr = body["run_result"]
    assert rr["stdout_truncated"] is True
    assert len(rr["stdout"].encode()) == 65536  # the server's max_output_bytes
    assert rr["killed_reason"] == "output" and rr["return_code"] == -9


def test_giant_line_without_newline_is_capped(contained):
    body = contained.run("import sys\nsys.stdout.write('y' * 50_000_000)", run_timeout=10)
    rr = body["run_result"]
    assert rr["stdout_truncated"] is True and set(rr["stdout"]) == {"y"}


def test_invalid_utf8_output_is_replaced(contained):
    body = contained.run("import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')")
    assert body["status"] == "Success"
    assert body["run_result"]["stdout"] == "ok \ufffd\ufffd end\n"


def test_disk_fill_in_workdir_fails_cleanly(contained):
    code = ("import errno\ni = 0\ntry:\n    while True:\n        with open(f'f{i}', 'wb') as f:\n"
            "            f.write(b'0' * (8 << 20))\n        i += 1\nexcept OSError as e:\n"
            "    print(errno.errorcode[e.errno])")
    body = contained.run(code, run_timeout=20)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"].strip() in ("ENOSPC", "EFBIG", "EDQUOT")


def test_single_huge_file_hits_file_size_limit(contained):
    code = "try:\n    open('big', 'wb').write(b'0' * (100 << 20))\nexcept OSError as e:\n    print(e.errno)"
    body = contained.run(code, run_timeout=10)
    assert body["run_result"]["stdout"].strip() in ("27", "28")  # EFBIG (RLIMIT_FSIZE) or ENOSPC (tmpfs)


def test_dev_shm_fill_fails_cleanly(contained):
    code = ("import errno\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n        while True:\n"
            "            f.write(b'0' * (8 << 20))\nexcept OSError as e:\n    print(errno.errorcode[e.errno])")
    body = contained.run(code, run_timeout=20)
    assert body["run_result"]["stdout"].strip() in ("ENOSPC", "EFBIG", "EACCES")


@pytest.mark.parametrize("target", ["/etc/passwd", "/usr/bin/alprl-owned", "/root/x"])
def test_writes_outside_private_dirs_are_refused(contained, target):
    code = f"try:\n    open({target!r}, 'a').write('pwned')\nexcept OSError as e:\n    print(type(e).__name__, e.errno)"
    out = contained.run(code)["run_result"]["stdout"]
    assert out.split()[0] in ("PermissionError", "OSError") and int(out.split()[1]) in (1, 13, 30)


def test_fd_exhaustion_gives_emfile(contained):
    code = ("import errno\nfs = []\ntry:\n    for i in range(10**5):\n        fs.append(open('/dev/null'))\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno], len(fs))")
    code_out = contained.run(code)["run_result"]["stdout"].split()
    assert code_out[0] == "EMFILE" and int(code_out[1]) < 300


def test_socket_exhaustion_gives_emfile(contained):
    code = ("import socket, errno\nss = []\ntry:\n    for i in range(10**5):\n"
            "        ss.append(socket.socket())\nexcept OSError as e:\n    print(errno.errorcode[e.errno])")
    assert contained.run(code)["run_result"]["stdout"].strip() == "EMFILE"


@pytest.mark.parametrize("code", [
    # C-level recursion (repr of a 10**6-deep list) with the recursion limit raised overflows the C stack.
    "import sys\nsys.setrecursionlimit(10**6)\nl = []\nfor _ in range(10**6):\n    l = [l]\nprint(repr(l)[:9])",
    "import ctypes\nctypes.string_at(0)",
], ids=["deep-c-recursion", "null-pointer"])
def test_segfault_is_a_failed_run_not_a_sandbox_error(contained, code):
    status, run, rc = run_status(contained.run(code, run_timeout=10))
    assert (status, run, rc) == ("Failed", "Finished", -11)


def test_deep_python_recursion_fails_without_sandbox_error(contained):
    # CPython 3.11 keeps pure-Python frames off the C stack: this ends in RecursionError or MemoryError (rc 1).
    code = "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)"
    status, run, rc = run_status(contained.run(code, run_timeout=20))
    assert status == "Failed" and run == "Finished" and rc in (1, -11)
