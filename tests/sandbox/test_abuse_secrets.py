"""Abuse matrix, secrets / filesystem / network / reward hacking (reference/sandbox.md §7), via a real server."""

from __future__ import annotations

import os

ENV_WHITELIST = {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
                 "MPLBACKEND", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"}


def stdout(body: dict) -> str:
    assert body["status"] in ("Success", "Failed"), body
    return body["run_result"]["stdout"]


def test_environment_holds_only_whitelisted_variables(contained, secret):
    out = stdout(contained.run("import os\nprint(sorted(os.environ))"))
    assert set(eval(out)) <= ENV_WHITELIST
    assert secret not in stdout(contained.run("import os\nprint(dict(os.environ))"))


def test_a_run_that_edits_its_environment_leaves_the_next_run_the_clean_one(contained):
    # The zygote sets the clean environment once and every run inherits it: edits must stay in their own run.
    contained.run("import os\nos.environ['LEAK'] = 'x'\nos.environ['PATH'] = '/nowhere'\nos.putenv('HOME', '/')")
    for _ in range(3):  # whichever slot the next runs land on
        env, cwd = eval(stdout(contained.run("import os\nprint(repr((dict(os.environ), os.getcwd())))")))
        assert "LEAK" not in env and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
        assert env["HOME"] == env["TMPDIR"] == cwd  # the run's own workdir


def test_proc_environ_of_self_init_and_server_hold_no_secret(contained, secret):
    server_pid = contained.handle.proc.pid
    code = (f"paths = ['/proc/self/environ', '/proc/1/environ', '/proc/1/cmdline', '/proc/{server_pid}/environ',\n"
            f"         '/proc/{server_pid}/cmdline', '/proc/self/cmdline']\n"
            "for p in paths:\n    try:\n        print(p, open(p, 'rb').read())\n"
            "    except OSError as e:\n        print(p, 'unreadable', e.errno)")
    out = stdout(contained.run(code))
    assert secret not in out
    assert "ALPRL_TEST_SECRET" not in out


def test_server_process_is_invisible_or_untouchable(contained):
    server_pid = contained.handle.proc.pid
    code = (f"import os\ntry:\n    os.kill({server_pid}, 0)\n    print('visible')\n"
            "except ProcessLookupError:\n    print('absent')\nexcept PermissionError:\n    print('forbidden')")
    assert stdout(contained.run(code)).strip() in ("absent", "forbidden")


def test_home_ssh_and_root_are_unreadable(contained):
    code = ("import os\nfor p in ['/root', os.path.expanduser('~root/.ssh'), '/root/.bash_history']:\n    try:\n"
            "        print(p, os.listdir(p) if os.path.isdir(p) else open(p).read()[:10])\n"
            "    except OSError as e:\n        print(p, 'denied', e.errno)")
    root_line, ssh_line, history_line = stdout(contained.run(code)).splitlines()
    assert "denied" in ssh_line and "denied" in history_line  # EACCES, or ENOENT where /root is covered
    # /root is unreadable, or (mount layer, Python installed under /root) shows only the exposed interpreter.
    assert "denied" in root_line or ".ssh" not in root_line and "bash" not in root_line


def test_previous_runs_files_are_gone(contained):
    first = stdout(contained.run("import os\nopen('secret.txt', 'w').write('s3cret')\n"
                                 "open('/tmp/left.txt', 'w').write('s3cret')\nprint(os.getcwd())"))
    workdir = first.strip()
    probe = (f"import os\nfor p in [{workdir!r} + '/secret.txt', 'secret.txt', '/tmp/left.txt']:\n"
             "    print(p, os.path.exists(p))\nprint(sorted(os.listdir('.')))")
    for _ in range(3):  # whichever slot serves it
        out = stdout(contained.run(probe))
        assert "True" not in out and "secret.txt" not in out.splitlines()[-1]
    assert not os.path.exists("/tmp/left.txt")


def test_tmp_writes_stay_private_to_the_run(contained):
    out = stdout(contained.run("open('/tmp/mine.txt', 'w').write('x')\nimport os\nprint(os.listdir('/tmp'))"))
    assert "mine.txt" in out
    assert not os.path.exists("/tmp/mine.txt")  # the host's /tmp never saw it


def test_outbound_connections_fail_fast(contained):
    code = ("import socket, time\nfor host, port in [('1.1.1.1', 53), ('169.254.169.254', 80)]:\n"
            "    t = time.time()\n    try:\n        socket.create_connection((host, port), timeout=5)\n"
            "        print('connected')\n    except OSError as e:\n        print('blocked', round(time.time() - t, 1))")
    out = stdout(contained.run(code, run_timeout=15))
    assert "connected" not in out and out.count("blocked") == 2


def test_dns_lookup_fails(contained):
    code = ("import socket\ntry:\n    print(socket.getaddrinfo('example.com', 80))\n"
            "except OSError as e:\n    print('no dns', type(e).__name__)")
    assert "no dns" in stdout(contained.run(code, run_timeout=15))


def test_api_port_on_loopback_is_unreachable(contained):
    port = int(contained.url.rsplit(":", 1)[1])
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('reached')\n"
            "except OSError as e:\n    print('unreachable', e.errno)\n"
            "s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('/var/run/docker.sock')\n    print('docker.sock open')\n"
            "except OSError as e:\n    print('docker.sock closed', e.errno)")
    out = stdout(contained.run(code, run_timeout=10))
    # where an engine runs on the host its socket exists (root:docker 0660), but a slot uid cannot connect
    assert "unreachable" in out and "docker.sock closed" in out


def test_exit_zero_before_checks_does_not_fake_output(contained):
    for exit_call in ("exit(0)", "import sys; sys.exit(0)", "import os; os._exit(0)"):
        body = contained.run(f"{exit_call}\nprint('ALL TESTS PASSED')")
        assert body["status"] == "Success" and body["run_result"]["return_code"] == 0
        assert "ALL TESTS PASSED" not in body["run_result"]["stdout"]  # graders compare outputs, not exit codes
