"""Answer extraction and math-verify grading (reference/environments.md §1, "Grading").

- `extract_boxed(text)`: content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces allowed),
  found in one linear pass, so adversarial model text cannot make it quadratic (`envs/boxed.py`, re-exported).
- `grade(pred, gold)`: `verify(parse("$" + gold + "$"), parse("\\boxed{" + pred + "}"))`, gold first (verify is
  not symmetric), bounded in time per answer (`timeout_s`, 2 s by default) from any thread; a slow or hanging
  answer scores 0 (False). How: math-verify's own timeouts use SIGALRM, which only works on the main thread, and
  no signal handler runs until a long call inside C returns (CPython's big-integer arithmetic, for one), so every
  grade that is not the integer fast path goes to a small pool of grading subprocesses. Each child grades on its main
  thread with math-verify's timeouts off and one interval timer of `timeout_s` for the whole answer (two parses
  and a verify); the parent waits `timeout_s + KILL_GRACE_S` after the request and kills the child if it has not
  answered (C-level hangs), starting a fresh one for the next request. The limit counts from the request to a
  ready child, so a child's start-up (importing sympy, ~1 s) is not charged to the answer that waits for it.
- Answers longer than `MAX_ANSWER_CHARS` are wrong without parsing (no gold here is longer than a few dozen
  characters; huge inputs would only cost parser time), so a model that prints a 5,000-digit number costs nothing.
- Memory: each child's address space is capped at `GRADER_MEMORY_BYTES` (RLIMIT_AS), so a power sympy tries to
  evaluate ends in a MemoryError (a wrong answer) instead of taking the machine's memory.
- A gold answer math-verify cannot grade (`envs.datasets.gradability.ungradable_reason`: unbalanced braces,
  nesting 200 deep, an exponent tower, 5,000 digits) is compared as a string instead: the prediction and the
  gold normalized as gold answers are (`envs.datasets.answers.normalize_text`), whitespace removed. That takes
  linear time in the calling thread, so a pathological benchmark row costs no grading child and no timeout.
- Fast path: when prediction and gold are both plain integers ("-12", "4517277"), they are compared as integers
  in the calling thread, the verdict math-verify gives for such pairs; most generated tasks have integer answers,
  and a rollout batch would otherwise queue them all on the grading subprocesses.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from envs.boxed import BOX_COMMANDS, extract_boxed, has_boxed  # noqa: F401  (re-exported: the grader's API)
from envs.datasets.answers import normalize_text
from envs.datasets.gradability import MAX_GRADED_CHARS, ungradable_reason

PLAIN_INTEGER = re.compile(r"[+-]?[0-9]{1,200}")
MAX_ANSWER_CHARS = MAX_GRADED_CHARS
GRADER_MEMORY_BYTES = 2 << 30  # a child with sympy loaded maps ~250 MB; the rest is room for one answer
DEFAULT_TIMEOUT_S = 2.0
KILL_GRACE_S = 1.0  # how long past the child's own timer the parent waits before killing it (pipe + scheduling)
STARTUP_TIMEOUT_S = 60.0  # a child imports math-verify (sympy) before it is ready; a loaded machine is slow
MAX_GRADERS = max(1, min(4, os.cpu_count() or 1))  # concurrent grading children per process


def verify_answer(pred: str, gold: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> bool:
    """math-verify in the calling thread, each parse and the verify under its SIGALRM timeout (main thread only;
    whole seconds, rounded up, as `signal.alarm` takes). `timeout_s=None` disables them (any thread)."""
    from math_verify import parse, verify  # lazy: importing math-verify (sympy) costs ~1 s

    timeout_s = None if timeout_s is None else max(1, math.ceil(timeout_s))

    gold_parsed = parse("$" + gold + "$", parsing_timeout=timeout_s)
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))


def grade(pred: str | None, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True iff the extracted answer `pred` equals `gold` mathematically, decided within `timeout_s` seconds of
    grading time (False past it). Safe from any thread; never raises."""
    if pred is None or not pred.strip():
        return False
    if ungradable_reason(gold):
        return same_as_strings(pred, gold)
    if len(pred) > MAX_ANSWER_CHARS:
        return False
    if PLAIN_INTEGER.fullmatch(pred.strip()) and PLAIN_INTEGER.fullmatch(gold.strip()):
        # the stripped text: str.strip() drops characters int() refuses (a control character such as \x1f)
        return int(pred.strip()) == int(gold.strip())
    try:
        return _POOL.grade(pred, gold, float(timeout_s))
    except Exception:  # e.g. no child could be started (OSError): an env must get a verdict, not an exception
        return False


def same_as_strings(pred: str, gold: str) -> bool:
    """How an ungradable gold is graded: equal after gold normalization, whitespace removed (linear time)."""
    return "".join(normalize_text(pred).split()) == "".join(normalize_text(gold).split())


class _Grader:
    """One grading child. Protocol: it prints `ready` once math-verify is imported; then one JSON line
    `{"pred", "gold", "timeout"}` in, one line `1` / `0` out."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {root!r}); from envs.tir.grading import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.ready = _read_line(self.proc.stdout, STARTUP_TIMEOUT_S) == b"ready\n"

    def ask(self, pred: str, gold: str, timeout_s: float) -> bytes | None:
        request = json.dumps({"pred": pred, "gold": gold, "timeout": timeout_s}) + "\n"
        try:
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
            return _read_line(self.proc.stdout, timeout_s + KILL_GRACE_S)
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class _GraderPool:
    """Up to MAX_GRADERS children shared by the threads of this process; a child that misses its deadline is
    killed, so a hung answer costs one child, never a thread. After fork (an AsyncVectorEnv worker) the inherited
    children belong to the parent: the pool starts over with its own."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_GRADERS)
        self._idle: list[_Grader] = []

    def grade(self, pred: str, gold: str, timeout_s: float) -> bool:
        if self._owner_pid != os.getpid():
            self._reset()
        with self._slots:
            with self._lock:
                grader = self._idle.pop() if self._idle else None
            if grader is None or grader.proc.poll() is not None:
                grader = _Grader()
            line = grader.ask(pred, gold, timeout_s) if grader.ready else None
            if line is None:
                grader.kill()
                return False
            with self._lock:
                self._idle.append(grader)
            return line.strip() == b"1"

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        if self._owner_pid == os.getpid():
            for grader in idle:
                grader.kill()


def _read_line(stream, deadline_s: float) -> bytes | None:
    """One line from a pipe, or None on timeout / EOF (select keeps a hung child from blocking us)."""
    ready, _, _ = select.select([stream], [], [], deadline_s)
    if not ready:
        return None
    line = stream.readline()
    return line if line.endswith(b"\n") else None


class _OutOfTime(BaseException):
    """The child's per-answer timer. A BaseException, so math-verify's `except Exception` cannot swallow it."""


def _alarm(signum, frame):
    raise _OutOfTime


def serve() -> None:
    """Grading child main loop: each answer under one interval timer (this is the child's main thread)."""
    import math_verify  # noqa: F401  (import before `ready`, so start-up is not charged to the first answer)

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = GRADER_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(GRADER_MEMORY_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.signal(signal.SIGALRM, _alarm)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for raw in sys.stdin.buffer:
        ok = False
        try:
            req = json.loads(raw)
            signal.setitimer(signal.ITIMER_REAL, max(float(req["timeout"]), 0.01))
            ok = verify_answer(str(req["pred"]), str(req["gold"]), timeout_s=None)
        except (Exception, _OutOfTime):
            ok = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


_POOL = _GraderPool()
