"""`docker compose up sandbox` for real: the offline-built image, per-run isolation inside the container, load,
restart policy, two replicas behind the client's balancing, and `compose down` leaving nothing behind.

Order matters only at the end: the restart test kills the server, and the last test takes the stack down.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from sandbox.client import SandboxClient

pytestmark = pytest.mark.timeout(600)


def stdout(body: dict) -> str:
    assert body["status"] in ("Success", "Failed"), body
    return body["run_result"]["stdout"]


def assert_contained(stack) -> None:
    """The server answers and no process of any run is left in the container."""
    assert stack.http.get("/v1/ping", timeout=5.0).json() == "pong"
    deadline = time.monotonic() + 10.0
    while (left := stack.slot_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"run processes survived: {left}"


def test_serves_run_code_with_per_run_uids_and_seccomp(stack):
    body = stack.run("import os\nprint(6 * 7, os.getuid())")
    answer, uid = stdout(body).split()
    assert body["status"] == "Success" and answer == "42" and int(uid) >= 10000
    info = stack.http.get("/v1/info").json()
    assert {"uid", "seccomp"} <= set(info["layers"]) and info["tier"] in ("T1", "T2")
    assert info["seccomp"]["action"] == "EPERM" and "ptrace" in info["seccomp"]["denied"]


def test_user_code_cannot_kill_or_trace_the_server(stack):
    server = stack.server_pid()
    code = (f"import ctypes, os, signal, subprocess\n"
            f"for pid in (1, {server}):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n        print(pid, 'killed')\n"
            "    except PermissionError:\n        print(pid, 'forbidden')\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            f"print('ptrace', libc.ptrace(16, {server}, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
            f"for p in ('/proc/{server}/environ', '/proc/1/environ', '/proc/{server}/mem'):\n"
            "    try:\n        open(p, 'rb').read(1)\n        print(p, 'read')\n"
            "    except OSError as e:\n        print(p, 'denied', e.errno)\n")
    out = stdout(stack.run(code)).splitlines()
    assert out[:2] == ["1 forbidden", f"{server} forbidden"], out
    assert out[2] == "ptrace -1 1", out  # EPERM (seccomp, and a foreign uid without CAP_SYS_PTRACE)
    assert all(" denied " in line for line in out[3:]), out
    assert stack.server_pid() == server  # the same server process is still there
    assert_contained(stack)


def test_kill_minus_one_ends_only_the_run(stack):
    server = stack.server_pid()
    body = stack.run("import subprocess, time\nsubprocess.Popen(['sleep', '1000'])\n"
                     "subprocess.run('kill -9 -1', shell=True)\ntime.sleep(5)\nprint('survived')")
    assert "survived" not in (body.get("run_result") or {}).get("stdout", "")
    assert stack.server_pid() == server
    assert_contained(stack)


@pytest.mark.parametrize("code, expected", [
    ("import os\nwhile True:\n    os.fork()", "Failed"),
    ("x = bytearray(10**10)", "Failed"),
    ("while True: pass", "Failed"),
    ("import sys\nwhile True: sys.stdout.write('x' * 65536)", "Failed"),
    ("import os\nos._exit = None\nimport sys\nsys.exit = None\nprint('ok')", "Success"),
], ids=["fork-bomb", "memory-bomb", "endless", "output-flood", "exit-patching"])
def test_abuse_cases_are_contained(stack, code, expected):
    body = stack.run(code, run_timeout=2.0)
    assert body["status"] == expected, body
    assert_contained(stack)


ENV_WHITELIST = {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
                 "MPLBACKEND", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"}


# The host abuse matrix (tests/sandbox/test_abuse_*.py) inspects host pids and host /tmp; these are its cases that
# mean the same inside the container, each checked on the run's stdout and then by assert_contained.
@pytest.mark.parametrize("code, check", [
    ("import os\nprint(sorted(os.environ))", lambda out: set(eval(out)) <= ENV_WHITELIST),
    ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
     "    os._exit(0)\nprint('parent exits')", lambda out: out == "parent exits\n"),
    ("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('x', flush=True)\nwhile True: pass",
     lambda out: out == "x\n"),
    ("import errno\nfor p in ('/etc/passwd', '/app/sandbox/service/app.py', '/usr/local/bin/python', '/root/x'):\n"
     "    try:\n        open(p, 'a').write('pwned')\n        print(p, 'written')\n"
     "    except OSError as e:\n        print(p, errno.errorcode[e.errno])",
     lambda out: "written" not in out and len(out.splitlines()) == 4),
    ("import errno\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n        while True:\n"
     "            f.write(b'0' * (8 << 20))\nexcept OSError as e:\n    print(errno.errorcode[e.errno])",
     lambda out: out.strip() in ("ENOSPC", "EFBIG")),
    ("import errno\nfs = []\ntry:\n    for i in range(10**5):\n        fs.append(open('/dev/null'))\n"
     "except OSError as e:\n    print(errno.errorcode[e.errno])", lambda out: out.strip() == "EMFILE"),
    ("import ctypes\nctypes.string_at(0)", lambda out: out == ""),
    ("import os\nprint(os.listdir('/root') if os.access('/root', os.R_OK) else 'denied')",
     lambda out: out.strip() == "denied" or ".ssh" not in out),
], ids=["env-whitelist", "double-forked-daemon", "ignores-sigterm", "writes-outside", "dev-shm-fill",
        "fd-exhaustion", "segfault", "root-home"])
def test_host_abuse_cases_hold_in_the_container(stack, code, check):
    body = stack.run(code, run_timeout=3.0)
    assert body["status"] in ("Success", "Failed"), body
    assert check(body["run_result"]["stdout"]), body["run_result"]
    assert_contained(stack)


def test_runs_cannot_read_each_others_files(stack):
    owner = ("import os, time\nopen('mine.txt', 'w').write('s3cret-a')\n"
             "open('/tmp/loose-a.txt', 'w').write('s3cret-a')\n"
             "open('/tmp/where-a.txt', 'w').write(os.getcwd())\nos.chmod('/tmp/where-a.txt', 0o644)\ntime.sleep(4)")
    thief = ("import os, time\ntime.sleep(1.5)\nwhere = open('/tmp/where-a.txt').read()\nprint('found', where)\n"
             "for p in (where + '/mine.txt', '/tmp/loose-a.txt', where, os.path.dirname(where)):\n"
             "    try:\n        print(p, open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
             "    except OSError as e:\n        print(p, 'denied', e.errno)")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(stack.run, owner, run_timeout=10.0)
        time.sleep(0.3)
        second = pool.submit(stack.run, thief, run_timeout=10.0)
        out = stdout(second.result())
        first.result()
    assert "s3cret-a" not in out, out
    # the workdirs are 0700 per slot uid; a file left in the shared /tmp is 0600 (the run's umask is 077)
    assert "found /tmp/alprl/" in out and out.count("denied 13") == 4, out
    assert_contained(stack)


def test_user_code_reaches_neither_the_internet_nor_the_host(stack):
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted: list = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    gateways = subprocess.run(["docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}",
                               f"{stack.project}_sandbox-net", "bridge"], capture_output=True, text=True).stdout.split()
    targets = [("1.1.1.1", 53), ("169.254.169.254", 80)] + [(g, port) for g in gateways]
    code = ("import socket\n"
            f"for host, port in {targets!r}:\n"
            "    try:\n        socket.create_connection((host, port), timeout=3)\n        print(host, 'connected')\n"
            "    except OSError as e:\n        print(host, 'blocked')\n"
            "try:\n    socket.getaddrinfo('example.com', 80)\n    print('dns resolved')\n"
            "except OSError:\n    print('dns failed')")
    try:
        out = stdout(stack.run(code, run_timeout=30.0))
    finally:
        listener.close()
    assert "connected" not in out and "dns failed" in out, out
    assert out.count("blocked") == len(targets) and not accepted, out


def test_a_thousand_requests_at_concurrency_32(stack):
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    with httpx.Client(base_url=stack.url, timeout=60.0, limits=limits) as http:
        def one(i: int) -> tuple[int, str]:
            resp = http.post("/run_code", json={"code": f"print({i} * 2)", "language": "python"})
            return resp.status_code, resp.json()["run_result"]["stdout"] if resp.status_code == 200 else resp.text

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(one, range(1000)))
    bad = [(i, r) for i, r in enumerate(results) if r != (200, f"{i * 2}\n")]
    assert bad == [], f"{len(bad)} of 1000 lost or wrong, e.g. {bad[:3]}"
    assert_contained(stack)


def test_two_replicas_behind_the_clients_balancing(stack, make_stack):
    other = make_stack("b")
    try:
        before = [s.http.get("/v1/info").json()["runs"] for s in (stack, other)]
        client = SandboxClient(f"{stack.url},{other.url}")
        try:
            outs = [client.run(f"print({i})").stdout for i in range(20)]
        finally:
            client.close()
        assert outs == [f"{i}\n" for i in range(20)]
        served = [s.http.get("/v1/info").json()["runs"] - b for s, b in zip((stack, other), before, strict=True)]
        assert all(n >= 5 for n in served) and sum(served) >= 20, served
        other.cmd("stop", "sandbox")  # one replica gone: the client keeps working on the other
        client = SandboxClient(f"{stack.url},{other.url}")
        try:
            assert [client.run("print('still')").stdout for _ in range(4)] == ["still\n"] * 4
        finally:
            client.close()
    finally:
        other.down()


def test_the_namespace_override_gives_tier_t2_with_loopback(make_stack):
    t2 = make_stack("ns", ("docker-compose.yml", "docker-compose.namespaces.yml"))
    try:
        info = t2.http.get("/v1/info").json()
        assert info["tier"] == "T2" and {"net", "pid", "mount", "uid", "seccomp"} <= set(info["layers"]), info
        assert "net.loopback" not in info["layer_errors"], info["layer_errors"]
        code = ("import socket, threading, os\nsrv = socket.create_server(('127.0.0.1', 0))\n"
                "threading.Thread(target=lambda: srv.accept()[0].sendall(b'hi'), daemon=True).start()\n"
                "c = socket.create_connection(srv.getsockname(), timeout=3)\nprint(c.recv(2).decode(), os.getpid())\n"
                "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    print('out')\n"
                "except OSError as e:\n    print('no route', e.errno)")
        greeting, pid, *rest = stdout(t2.run(code)).split()
        assert greeting == "hi" and int(pid) < 10 and rest[:2] == ["no", "route"]  # own pid namespace, no egress
        assert_contained(t2)
    finally:
        t2.down()


def test_a_killed_server_is_brought_back_by_the_restart_policy(stack):
    container = stack.container()
    server = stack.server_pid()
    killed = subprocess.run(["docker", "exec", container, "python", "-c", f"import os; os.kill({server}, 9)"],
                            timeout=30)
    # 137: the container went down with its server before the exec'd process exited (SIGKILL), which is the point
    assert killed.returncode in (0, 137), killed
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", container], capture_output=True,
                                  text=True).stdout.strip()
        if restarts and int(restarts) >= 1:
            break
        time.sleep(0.5)
    assert restarts and int(restarts) >= 1, "the container was not restarted"
    stack.wait_ready()
    assert stdout(stack.run("print('back')")) == "back\n"


def test_compose_down_leaves_no_container_or_network(stack):
    stack.down()
    label = f"label=com.docker.compose.project={stack.project}"
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True).stdout
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", label], capture_output=True,
                              text=True).stdout
    assert containers.strip() == "" and networks.strip() == ""
