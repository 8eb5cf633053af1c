"""Each isolation layer alone (reference/sandbox.md §5: "each layer detected at startup, reported, tested alone").

Pools are built in-process with one light zygote (no heavy preload) so each costs a fraction of a second.
Layers this machine cannot provide are skipped with the reason the zygote reported.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from conftest import IS_ROOT, fresh_uid_base

from sandbox.execution import zygote
from sandbox.execution.pool import Pool, RunRequest, SandboxStartError, UnsafeSandbox
from sandbox.isolation import linux
from sandbox.settings import Settings


def make_pool(layers: str, *, skip_on_start_error: bool = True) -> Pool:
    settings = Settings(workers=1, layers=layers, uid_base=fresh_uid_base(), preload="math", preload_heavy="",
                        max_sessions=0)
    try:
        pool = Pool(settings, allow_unsafe=True)
    except SandboxStartError as exc:
        if not skip_on_start_error:
            raise
        pytest.skip(str(exc))
    wanted = settings.requested_layers()
    missing = wanted - set(pool.info()["layers"])
    if missing:
        reasons = pool.info()["layer_errors"]
        pool.close()
        pytest.skip(f"layer(s) {sorted(missing)} unavailable here: {reasons}")
    return pool


def run(pool: Pool, code: str, **kw) -> str:
    result = pool.run(RunRequest(code, **kw))
    assert result.status in ("Success", "Failed"), result
    return result.stdout


DAEMON = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
          "        os.write(w, str(os.getpid()).encode()); time.sleep(60)\n    os._exit(0)\n"
          "print(os.read(r, 32).decode())")


def test_no_isolation_is_refused_unless_allowed():
    settings = Settings(workers=1, layers="none", uid_base=fresh_uid_base(), preload="math", preload_heavy="",
                        max_sessions=0)
    with pytest.raises(UnsafeSandbox, match="ALPRL_SANDBOX_ALLOW_UNSAFE"):
        Pool(settings, allow_unsafe=False)


def test_t0_group_kill_and_subreaper_catch_a_setsid_daemon():
    pool = make_pool("none")
    try:
        assert pool.info()["tier"] == "T0"
        pid = int(run(pool, DAEMON))
        with pytest.raises(ProcessLookupError):  # no PID namespace: the printed pid is a host pid
            os.kill(pid, 0)
    finally:
        pool.close()


@pytest.mark.skipif(not IS_ROOT, reason="the uid layer needs the server to run as root")
def test_uid_layer_runs_code_as_the_slot_uid_and_kills_its_daemons():
    try:
        pool = make_pool("uid", skip_on_start_error=False)
    except SandboxStartError:  # Python installed under a 0700 dir (/root): only the mount layer exposes it
        pool = make_pool("uid,mount")  # still no PID namespace: daemons must be found and killed by uid
    try:
        uid = pool._slots[0].uid
        assert run(pool, "import os\nprint(os.getuid(), os.geteuid(), os.getgroups())") == f"{uid} {uid} []\n"
        run(pool, DAEMON)
        assert linux.pids_of_uid({uid}) == []
        assert "Errno 1" in run(pool, "import os\ntry:\n    os.kill(1, 0)\nexcept OSError as e:\n    print(e)")
    finally:
        pool.close()


def test_net_layer_blocks_the_hosts_loopback():
    # The run's namespace has its own loopback (up, for SandboxFusion parity): the host's 127.0.0.1 is not it.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
             "    print('connected')\nexcept OSError as e:\n    print('blocked', e.errno)")
    try:
        isolated, open_ = make_pool("net"), make_pool("none")
        try:
            assert run(isolated, probe).startswith("blocked")
            assert run(open_, probe) == "connected\n"  # what T0 leaves open, shown for contrast
        finally:
            isolated.close()
            open_.close()
    finally:
        listener.close()


def test_pid_layer_hides_outside_processes_and_survives_kill_minus_one():
    pool = make_pool("pid")
    try:
        out = run(pool, f"import os\nprint(os.getppid())\ntry:\n    os.kill({os.getpid()}, 0)\n    print('sees')\n"
                        "except ProcessLookupError:\n    print('hidden')\ntry:\n    os.kill(-1, 9)\n"
                        "except ProcessLookupError:\n    pass  # nobody else in the namespace to signal\nprint('alive')")
        assert out.split() == ["1", "hidden", "alive"]  # parent is the namespace's init (the zygote)
        assert run(pool, "print('next run ok')") == "next run ok\n"
    finally:
        pool.close()


def test_mount_layer_gives_private_tmp_and_read_only_root():
    pool = make_pool("mount")
    try:
        out = run(pool, "open('/tmp/only-here', 'w').write('x')\ntry:\n    open('/etc/alprl-test', 'w')\n"
                        "except OSError as e:\n    print(e.errno)")
        assert out.strip() == "30"  # EROFS even though this run is root (no uid layer here)
        assert not os.path.exists("/tmp/only-here")
        assert run(pool, "import os\nprint(os.path.exists('/tmp/only-here'))") == "False\n"  # wiped after the run
    finally:
        pool.close()


def test_importable_paths_hold_the_venv_and_the_sandbox_package_not_the_project_root():
    # The project root may be closed to other users (a 0700 `mktemp -d` clone): exposing it whole would keep
    # the venv inside it unreachable for the slot uid, so only the package and the interpreter's paths go in.
    package = Path(zygote.__file__).resolve().parents[1]  # sandbox/ (the zygote lives in its execution room)
    paths = [os.path.realpath(p) for p in zygote.importable_paths()]
    assert str(package) in paths and str(package.parent) not in paths
    assert os.path.realpath(sys.prefix) in paths
    assert any(p.endswith("site-packages") for p in paths)
