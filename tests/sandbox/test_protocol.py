"""The zygote control protocol over a real SOCK_SEQPACKET socketpair: the per-run messages as marshalled plain
tuples, everything else pickled, descriptors alongside, and the ends of the conversation."""

from __future__ import annotations

import os
import socket

import pytest

from sandbox.execution.protocol import MARSHALLED, Limits, RunReport, RunSpec, SessionSpec, recv, send

LIMITS = Limits(timeout_s=2.5, memory_mb=512, max_file_mb=8, max_open_files=64, max_processes=16, cpu_s=4)


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield a, b
    a.close()
    b.close()


def test_a_run_and_its_report_round_trip_as_marshalled_tuples_with_descriptors(pair):
    a, b = pair
    r, w = os.pipe()
    spec = RunSpec(LIMITS, fetch_files=("out.txt", "/tmp/x"), max_fetch_bytes=123)
    send(a, "run", spec, fds=[r, w])
    raw = b.recv(1 << 16, socket.MSG_PEEK)
    assert raw[:1] == MARSHALLED  # not a pickle: no class is looked up on the zygote's side
    kind, got, fds = recv(b)
    assert (kind, got) == ("run", spec) and len(fds) == 2
    os.write(fds[1], b"through")  # the received descriptors are the same pipe
    assert os.read(r, 16) == b"through"
    for fd in (r, w, *fds):
        os.close(fd)
    report = RunReport(-9, 0.25, "timeout", setup_error="", cleanup_error="/tmp/y: busy")
    send(b, "exited", report)
    assert recv(a) == ("exited", report, [])


def test_other_messages_stay_pickled(pair):
    a, b = pair
    send(a, "start", SessionSpec(LIMITS))
    assert b.recv(1 << 16, socket.MSG_PEEK)[:1] == b"\x80"  # pickle's PROTO opcode
    assert recv(b) == ("start", SessionSpec(LIMITS), [])
    send(b, "ready", {"pid": 7, "layers": ["net"]})
    assert recv(a) == ("ready", {"pid": 7, "layers": ["net"]}, [])


def test_a_closed_peer_is_the_end_of_the_conversation(pair):
    a, b = pair
    a.close()
    with pytest.raises(EOFError):
        recv(b)
