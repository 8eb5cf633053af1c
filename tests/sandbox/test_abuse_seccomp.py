"""Abuse matrix, the seccomp layer: each denied syscall, invoked by user code through a real server, gets EPERM.

User code calls ``libc.syscall(nr, ...)`` with this architecture's number (resolved here by libseccomp, so the
test is not tied to x86-64) and prints the errno; the run itself must end normally (status Success, exit 0).
Arguments are chosen to be harmless even if the filter were missing (NULL pointers, fd -1, query-only
operations), and a contrast run without the layer shows the filter, not a missing capability, gives the EPERM
for the calls that would otherwise succeed or fail differently. Skipped where the layer cannot load.
"""

from __future__ import annotations

import errno
import platform

import pytest
from conftest import fresh_uid_base

from sandbox.execution.pool import Pool, RunRequest, SandboxStartError
from sandbox.isolation import seccomp
from sandbox.settings import Settings

NULL = 0
# syscall → harmless arguments (ints; bytes become char pointers). Every call in DENIED_SYSCALLS has a probe.
PROBES: dict[str, tuple] = {
    "ptrace": (0, 0, 0, 0),  # PTRACE_TRACEME: succeeds without the filter
    "process_vm_readv": ("PID", NULL, 0, NULL, 0, 0),  # zero iovecs on our own pid: succeeds without it
    "process_vm_writev": ("PID", NULL, 0, NULL, 0, 0),
    "mount": (NULL, NULL, NULL, 0, NULL), "umount2": (NULL, 0), "umount": (NULL,),
    "pivot_root": (NULL, NULL), "chroot": (NULL,),
    "unshare": (0,),  # no flags: a no-op success without the filter
    "setns": (-1, 0),  # EBADF without the filter
    "open_tree": (-1, NULL, 0), "move_mount": (-1, NULL, -1, NULL, 0), "fsopen": (NULL, 0),
    "fsconfig": (-1, 0, NULL, NULL, 0), "fsmount": (-1, 0, 0), "fspick": (-1, NULL, 0),
    "mount_setattr": (-1, NULL, 0, NULL, 0),
    "keyctl": (0, -2, 0),  # KEYCTL_GET_KEYRING_ID of the process keyring, create=0: a query
    "add_key": (NULL, NULL, NULL, 0, -2), "request_key": (NULL, NULL, NULL, 0),
    "bpf": (-1, NULL, 0), "perf_event_open": (NULL, 0, -1, -1, 0), "userfaultfd": (0,),
    "io_uring_setup": (1, NULL), "io_uring_enter": (-1, 0, 0, 0, NULL, 0), "io_uring_register": (-1, 0, NULL, 0),
    "kexec_load": (0, 1 << 30, NULL, 0),  # more segments than KEXEC_SEGMENT_MAX: EINVAL even for root
    "kexec_file_load": (-1, -1, 0, NULL, 0), "init_module": (NULL, 0, NULL), "finit_module": (-1, NULL, 0),
    "delete_module": (NULL, 0),
    "reboot": (0, 0, 0, NULL),  # wrong magic: EINVAL even for root
    "swapon": (NULL, 0), "swapoff": (NULL,), "acct": (b"/nonexistent/alprl-acct", ),
    "quotactl": (0, NULL, 0, NULL), "quotactl_fd": (-1, 0, 0, NULL),
    "personality": (0xFFFFFFFF,),  # query the current persona: succeeds without the filter
}
# Calls whose unfiltered answer is never EPERM here (success, EBADF): the contrast run checks these.
NOT_EPERM_WITHOUT_FILTER = ("ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "personality",
                            "io_uring_enter", "io_uring_register")


def syscall_numbers() -> dict[str, int]:
    try:
        lib = seccomp._libseccomp()
    except seccomp.SeccompUnavailable as exc:
        pytest.skip(str(exc))
    found = {}
    for name in PROBES:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0:  # < 0: unknown, or a pseudo-number for a call this architecture lacks (umount on x86-64)
            found[name] = nr
    return found


def probe_code(names: list[str]) -> str:
    """User code: call each syscall, print 'name errno' (0 = it succeeded)."""
    numbers = syscall_numbers()
    calls = {name: (numbers[name], PROBES[name]) for name in names if name in numbers}
    return ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            f"for name, (nr, args) in {calls!r}.items():\n"
            "    args = [os.getpid() if a == 'PID' else ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a)"
            " for a in args]\n"
            "    ctypes.set_errno(0)\n"
            "    ret = libc.syscall(ctypes.c_long(nr), *args)\n"
            "    print(name, ctypes.get_errno() if ret == -1 else 0)\n")


def errnos(stdout: str) -> dict[str, int]:
    return {name: int(code) for name, code in (line.split() for line in stdout.splitlines())}


@pytest.fixture()
def filtered(contained):
    if "seccomp" not in contained.info()["layers"]:
        pytest.skip(f"seccomp layer unavailable: {contained.info()['layer_errors'].get('seccomp')}")
    return contained


def test_every_denied_syscall_has_a_probe():
    assert set(seccomp.DENIED_SYSCALLS) == set(PROBES)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_denied_syscall_gets_eperm(filtered, name):
    if name not in syscall_numbers():
        pytest.skip(f"{name} does not exist on this architecture")
    body = filtered.run(probe_code([name]))
    assert body["status"] == "Success" and body["run_result"]["return_code"] == 0, body
    assert errnos(body["run_result"]["stdout"]) == {name: errno.EPERM}


def clone_code(flags: int) -> str:
    """User code: raw clone(2) with `flags` | SIGCHLD and no new stack (fork-like); prints 'ret errno'."""
    nr = _number("clone")
    return ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            f"ret = libc.syscall(ctypes.c_long({nr}), ctypes.c_long({flags | 17}), 0, 0, 0, 0)\n"
            "if ret == 0:\n    os._exit(0)  # a child made despite the filter: leave at once, the parent reports it\n"
            "if ret > 0:\n    os.waitpid(ret, 0)\n"
            "print(ret if ret <= 0 else 'child', ctypes.get_errno() if ret == -1 else 0)")


def _number(name: str) -> int:
    nr = seccomp._libseccomp().seccomp_syscall_resolve_name(name.encode())
    if nr < 0:
        pytest.skip(f"{name} does not exist on this architecture (or libseccomp does not know it)")
    return nr


@pytest.mark.parametrize("flag", sorted(seccomp.CLONE_NEW_FLAGS))
def test_clone_into_a_new_namespace_gets_eperm(filtered, flag):
    # without this rule clone(CLONE_NEWUSER | CLONE_NEWNET) gives the run every capability in a namespace of its own
    body = filtered.run(clone_code(seccomp.CLONE_NEW_FLAGS[flag]))
    assert body["status"] == "Success" and body["run_result"]["stdout"] == f"-1 {errno.EPERM}\n", body


def test_plain_clone_still_forks_and_clone3_is_not_implemented(filtered):
    assert filtered.run(clone_code(0))["run_result"]["stdout"] == "child 0\n"  # fork-like clone: allowed
    nr = _number("clone3")
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
            f"ret = libc.syscall(ctypes.c_long({nr}), None, ctypes.c_long(0))\nprint(ret, ctypes.get_errno())")
    body = filtered.run(code)  # unfiltered, a NULL clone_args is EFAULT or EINVAL; filtered: "not implemented"
    assert body["run_result"]["stdout"] == f"-1 {errno.ENOSYS}\n", body


def test_ptrace_attach_to_the_parent_gets_eperm(filtered):
    nr = syscall_numbers()["ptrace"]
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"ret = libc.syscall(ctypes.c_long({nr}), ctypes.c_long(16), ctypes.c_long(os.getppid()), 0, 0)\n"
            "print(ret, ctypes.get_errno())")  # 16 = PTRACE_ATTACH
    body = filtered.run(code)
    assert body["status"] == "Success" and body["run_result"]["stdout"] == f"-1 {errno.EPERM}\n", body


def test_filter_is_inherited_by_subprocesses_and_sessions(filtered):
    code = ("import subprocess, sys\nprint(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])\n"
            "print(subprocess.run([sys.executable, '-c', " + repr(probe_code(["ptrace"])) + "],"
            " capture_output=True, text=True).stdout, end='')")
    body = filtered.run(code, run_timeout=10)
    assert body["run_result"]["stdout"] == f"2\nptrace {errno.EPERM}\n", body  # 2 = SECCOMP_MODE_FILTER
    sid = filtered.http.post("/sessions").json()["session_id"]
    cell = filtered.http.post(f"/sessions/{sid}/execute", json={"code": probe_code(["unshare"])}).json()
    assert cell["stdout"] == f"unshare {errno.EPERM}\n", cell
    filtered.http.delete(f"/sessions/{sid}")


def test_normal_code_still_works_under_the_filter(filtered):
    code = ("import threading, json, os, fractions, subprocess, sys\nout = []\n"
            "ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "with open('data.json', 'w') as f:\n    json.dump(sorted(out), f)\n"
            "print(json.load(open('data.json')), fractions.Fraction(1, 3) * 3, os.listdir('.').count('data.json'))\n"
            "print(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout,"
            " end='')\n"
            "import numpy, sympy\nprint(int(numpy.arange(10).sum()), sympy.factor(sympy.Symbol('x')**2 - 1))")
    body = filtered.run(code, run_timeout=20)
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "[0, 1, 2, 3, 4, 5, 6, 7] 1 1\n42\n45 (x - 1)*(x + 1)\n"


def test_info_reports_the_layer_and_its_denied_calls(filtered):
    info = filtered.http.get("/v1/info").json()
    assert "seccomp" in info["layers"] and "seccomp" not in info["layer_errors"]
    assert info["seccomp"]["action"] == "EPERM"
    assert set(info["seccomp"]["denied_clone_flags"]) == set(seccomp.CLONE_NEW_FLAGS)
    assert info["seccomp"]["enosys"] in ([], ["clone3"])
    assert set(info["seccomp"]["denied"]) == set(syscall_numbers()) <= set(seccomp.DENIED_SYSCALLS)


def test_without_the_layer_the_probed_calls_are_not_eperm():
    """Contrast: the EPERM above comes from the filter (harmless probes, so a T0 pool is fine here)."""
    with open("/proc/self/status") as f:
        if f.read().split("Seccomp:")[1].split()[0] != "0":
            pytest.skip("the tests themselves run under a seccomp filter (e.g. Docker's): no unfiltered contrast")
    settings = Settings(workers=1, layers="none", uid_base=fresh_uid_base(), preload="math", preload_heavy="",
                        max_sessions=0)
    pool = Pool(settings, allow_unsafe=True)
    try:
        result = pool.run(RunRequest(probe_code(list(NOT_EPERM_WITHOUT_FILTER)), timeout_s=10))
        got = errnos(result.stdout)
        assert got and all(code != errno.EPERM for code in got.values()), got
    finally:
        pool.close()


def test_missing_libseccomp_degrades_with_a_reason(monkeypatch):
    monkeypatch.setattr(seccomp, "LIBSECCOMP", "libalprl-no-such-seccomp.so.9")
    with pytest.raises(seccomp.SeccompUnavailable, match="install libseccomp2"):
        seccomp.Filter.build()


def test_required_but_unavailable_refuses_to_start():
    pool = Pool.__new__(Pool)  # only the start-up safety check, with a zygote report that lacks the layer
    pool.settings = Settings(require_seccomp=True)
    pool.info_first = {"layers": ["uid", "net"], "errors": {"seccomp": "libseccomp.so.2 not loadable"}}
    with pytest.raises(SandboxStartError, match="SANDBOX_REQUIRE_SECCOMP=1 but .* libseccomp.so.2 not loadable"):
        pool._check_safety(True)


def test_required_and_available_starts():
    settings = Settings(workers=1, layers="seccomp", require_seccomp=True, uid_base=fresh_uid_base(),
                        preload="math", preload_heavy="", max_sessions=0)
    try:
        pool = Pool(settings, allow_unsafe=True)
    except SandboxStartError as exc:
        pytest.skip(str(exc))
    try:
        assert pool.info()["layers"] == ["seccomp"] and pool.info()["seccomp"]["denied"]
        assert pool.run(RunRequest(probe_code(["bpf"]))).stdout == f"bpf {errno.EPERM}\n"
    finally:
        pool.close()


def test_x32_syscall_numbers_do_not_bypass_the_filter(filtered):
    """On x86-64, nr | 0x40000000 reaches the x32 table; the filter treats it as a foreign ABI and kills."""
    if platform.machine() != "x86_64":
        pytest.skip("the x32 ABI exists only on x86-64")
    nr = syscall_numbers()["ptrace"] | 0x40000000
    body = filtered.run(f"import ctypes\nctypes.CDLL(None).syscall(ctypes.c_long({nr}), 0, 0, 0, 0)\nprint('ran')")
    assert body["status"] == "Failed" and body["run_result"]["return_code"] == -31, body  # SIGSYS
    assert body["run_result"]["stdout"] == ""


def _seccomp_mode_of(zygote) -> str:
    """Seccomp: field of the zygote process (under the pid layer, the shim's only child is the zygote)."""
    pid = zygote.proc.pid
    if "pid" in zygote.info["layers"]:
        pid = int(open(f"/proc/{pid}/task/{pid}/children").read().split()[0])
    return open(f"/proc/{pid}/status").read().split("Seccomp:")[1].split()[0]


def test_the_light_zygote_filters_itself_once_and_absolute_paths_go_to_the_heavy_one():
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="fractions",
                         heavy_triggers="fractions", max_sessions=0), allow_unsafe=True)
    try:
        if "seccomp" not in pool.info()["layers"]:
            pytest.skip(f"seccomp layer unavailable: {pool.info()['layer_errors'].get('seccomp')}")
        status = "print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])\n"
        light = pool.run(RunRequest(status + probe_code(["unshare"])))
        heavy = pool.run(RunRequest("import fractions\n" + status + probe_code(["unshare"])))
        for result in (light, heavy):  # every run is filtered, wherever the filter was loaded
            assert result.stdout == f"2\nunshare {errno.EPERM}\n", result
        slot = pool._slots[0]
        assert slot.light.info["seccomp"]["installed"] == "zygote" and _seccomp_mode_of(slot.light) == "2"
        assert slot.heavy.info["seccomp"]["installed"] == "run" and _seccomp_mode_of(slot.heavy) == "0"
        assert pool.info()["seccomp"]["installed"] == "zygote"
        if "mount" in pool.info()["layers"]:  # a per-run bind mount: only the heavy zygote can make it
            mapped = pool.run(RunRequest("print(open('/mnt/alprl-in.txt').read())",
                                         files={"/mnt/alprl-in.txt": b"mapped"}))
            assert mapped.stdout == "mapped\n", mapped
    finally:
        pool.close()


def test_without_a_heavy_zygote_the_light_one_installs_per_run_and_maps_absolute_paths():
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="", max_sessions=0),
                allow_unsafe=True)
    try:
        if "seccomp" not in pool.info()["layers"]:
            pytest.skip(f"seccomp layer unavailable: {pool.info()['layer_errors'].get('seccomp')}")
        assert pool.info()["seccomp"]["installed"] == "run" and _seccomp_mode_of(pool._slots[0].light) == "0"
        assert errnos(pool.run(RunRequest(probe_code(["unshare"]))).stdout) == {"unshare": errno.EPERM}
        if "mount" in pool.info()["layers"]:
            mapped = pool.run(RunRequest("print(open('/mnt/alprl-in.txt').read())",
                                         files={"/mnt/alprl-in.txt": b"mapped"}))
            assert mapped.stdout == "mapped\n", mapped
    finally:
        pool.close()


def test_absolute_paths_without_a_heavy_zygote_get_one_clear_error(monkeypatch):
    # The heavy zygote failing to start (e.g. a broken numpy install) is forced here by making its spawn raise the
    # error a failed start raises; everything else is real.
    from sandbox.execution.supervision import WorkerFailure

    real_spawn = Pool._spawn

    def spawn(self, slot, which):
        if which == "heavy":
            raise WorkerFailure("zygote for slot 0 failed to start: forced")
        return real_spawn(self, slot, which)

    monkeypatch.setattr(Pool, "_spawn", spawn)
    pool = Pool(Settings(workers=1, uid_base=fresh_uid_base(), preload="math", preload_heavy="fractions",
                         heavy_triggers="fractions", max_sessions=0), allow_unsafe=True)
    try:
        result = pool.run(RunRequest("print(1)", files={"/mnt/alprl-in.txt": b"x"}))
        assert result.status == "SandboxError" and "absolute file paths run in the heavy zygote" in result.stderr
        assert pool.run(RunRequest("import fractions\nprint(2)")).stdout == "2\n"  # heavy code: the light one
        assert pool.run(RunRequest("print(3)", files={"in.txt": b"x"})).stdout == "3\n"  # relative paths
    finally:
        pool.close()
