"""Answer extraction and math-verify grading (reference/environments.md §1, "Grading").

- `extract_boxed(text)`: content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces allowed),
  found in one linear pass, so adversarial model text cannot make it quadratic.
- `grade(pred, gold)`: `verify(parse("$" + gold + "$"), parse("\\boxed{" + pred + "}"))`, gold first (verify is
  not symmetric). math-verify enforces its timeouts with SIGALRM, which only works on the main thread:
  on the main thread we call it in-process with timeouts; from any other thread (rollout worker pools) the
  call goes to a grading subprocess whose own main thread runs math-verify with timeouts, and the caller
  additionally waits at most a wall-clock backstop, killing and replacing the subprocess if it hangs.
  So grading is safe from worker threads and no adversarial answer (`\\boxed{9^{9^{9^9}}}`) can hang an env.
- Answers longer than `MAX_ANSWER_CHARS` are wrong without parsing (no gold here is longer than a few dozen
  characters; huge inputs would only cost parser time).
- Fast path: when prediction and gold are both plain integers ("-12", "4517277"), they are compared as integers
  in the calling thread, the verdict math-verify gives for such pairs; most generated tasks have integer answers,
  and a rollout batch would otherwise queue them all on the one grading subprocess.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
from pathlib import Path

BOX_COMMANDS = ("\\boxed", "\\fbox")
PLAIN_INTEGER = re.compile(r"[+-]?[0-9]{1,200}")
MAX_ANSWER_CHARS = 1000
DEFAULT_TIMEOUT_S = 5


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of every balanced '{' to the index of its '}' (one pass, a stack)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _box_openings(text: str) -> list[int]:
    """Indices of the '{' that opens each `\\boxed{` / `\\fbox{` (spaces allowed before the brace)."""
    found = []
    for cmd in BOX_COMMANDS:
        start = text.find(cmd)
        while start != -1:
            j = start + len(cmd)
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                found.append(j)
            start = text.find(cmd, start + 1)
    return sorted(found)


def extract_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` or `\\fbox{...}` in `text`, or None."""
    openings = _box_openings(text)
    if not openings:
        return None
    pairs = _matching_braces(text)
    for brace in reversed(openings):
        if brace in pairs:
            return text[brace + 1: pairs[brace]]
    return None


def has_boxed(text: str) -> bool:
    """Whether the text attempts a boxed answer (SimpleTIR's test: `\\boxed{` appears), complete or not."""
    return bool(_box_openings(text))


def verify_answer(pred: str, gold: str, *, timeout_s: int | None = DEFAULT_TIMEOUT_S) -> bool:
    """math-verify in the calling thread. `timeout_s=None` disables its SIGALRM timeouts (any thread)."""
    from math_verify import parse, verify  # lazy: importing math-verify (sympy) costs ~1 s

    gold_parsed = parse("$" + gold + "$", parsing_timeout=timeout_s)
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))


def grade(pred: str | None, gold: str, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """True iff the extracted answer `pred` equals `gold` mathematically. Safe from any thread; never raises."""
    if pred is None or not pred.strip() or len(pred) > MAX_ANSWER_CHARS:
        return False
    if PLAIN_INTEGER.fullmatch(pred.strip()) and PLAIN_INTEGER.fullmatch(gold.strip()):
        return int(pred) == int(gold)
    if threading.current_thread() is threading.main_thread():
        try:
            return verify_answer(pred, gold, timeout_s=timeout_s)
        except Exception:  # math-verify catches its own errors; this guards the env contract (never raise)
            return False
    return _WORKER.grade(pred, gold, timeout_s)


class _GradingProcess:
    """One grading subprocess shared by all threads of this process (a lock serializes requests).

    Protocol: one JSON line `{"pred", "gold", "timeout"}` in, one line `1` / `0` out. The child grades on
    its main thread with math-verify's own timeouts; the parent waits at most `3 * timeout + 5` seconds
    (two parses and one verify, each bounded) and replaces the child if it does not answer in time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner_pid = -1

    def _start(self) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parents[2])
        code = f"import sys; sys.path.insert(0, {root!r}); from envs.tir.grading import serve; serve()"
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    def _ensure(self) -> subprocess.Popen:
        # After fork (e.g. an AsyncVectorEnv worker) the inherited handle belongs to the parent: start our own.
        if self._proc is None or self._proc.poll() is not None or self._owner_pid != os.getpid():
            self._proc, self._owner_pid = self._start(), os.getpid()
        return self._proc

    def _kill(self) -> None:
        if self._proc is not None and self._owner_pid == os.getpid():
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def grade(self, pred: str, gold: str, timeout_s: int) -> bool:
        request = json.dumps({"pred": pred, "gold": gold, "timeout": timeout_s}) + "\n"
        with self._lock:
            try:
                proc = self._ensure()
                proc.stdin.write(request.encode())
                proc.stdin.flush()
                line = _read_line(proc.stdout, deadline_s=3 * timeout_s + 5 + 10)  # +10: child start-up
            except (OSError, ValueError):
                line = None
            if line is None:
                self._kill()
                return False
            return line.strip() == b"1"

    def close(self) -> None:
        with self._lock:
            self._kill()


def _read_line(stream, deadline_s: float) -> bytes | None:
    """One line from a pipe, or None on timeout / EOF (select keeps a hung child from blocking us)."""
    ready, _, _ = select.select([stream], [], [], deadline_s)
    if not ready:
        return None
    line = stream.readline()
    return line if line.endswith(b"\n") else None


def serve() -> None:
    """Grading subprocess main loop (runs on the child's main thread, so math-verify timeouts work)."""
    for raw in sys.stdin.buffer:
        try:
            req = json.loads(raw)
            ok = verify_answer(str(req["pred"]), str(req["gold"]), timeout_s=int(req["timeout"]))
        except Exception:
            ok = False
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


_WORKER = _GradingProcess()
