"""One BFCL multi-turn episode: the simulators' state, the calls made per user turn and step, and BFCL's verdict.

Calls run on BFCL's own API simulators through its `execute_multi_turn_func_call` (the function its inference loop
and its checker use), and the verdict is its `multi_turn_checker` on the decoded calls, read as its eval runner reads
it (`eval_checker/eval_runner.py`): an episode that did not reach its last user turn (force-terminated) fails; steps
without a decodable call are left out; the checker then re-executes every turn's calls against the ground truth's
and compares state and responses turn by turn. A turn's verdict (`turn_verdicts`) is the checker's on the turns so
far, the step-level credit BFCL itself defines.

`execute_multi_turn_func_call` keeps each simulator instance in its module's globals under
"<model name>_<entry id>_<class>_instance" and reuses it on the next call of that name; each session and each
verdict runs under a name of its own and removes its instances when done, so no state leaks between episodes.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

MAX_STEPS_PER_TURN = 20
"""Steps (model turns) within one user turn before BFCL's inference force-quits the entry (MAXIMUM_STEP_LIMIT)."""

_names = itertools.count()


def _fresh_name(kind: str) -> str:
    return f"alprl_{kind}_{next(_names)}"


def _forget(model_name: str) -> None:
    """Drop the simulator instances BFCL cached for `model_name` (and the checker's `_eval` copies)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    prefix = re.sub(r"[-./:]", "_", model_name)
    for key in [k for k in vars(multi_turn_utils) if k.startswith(prefix) and k.endswith("_instance")]:
        del vars(multi_turn_utils)[key]


class Session:
    """The episode of `entry` (a BFCL test entry with its function docs) against `truth` (per turn, its calls)."""

    def __init__(self, entry: dict[str, Any], truth: list[list[str]]):
        self.entry, self.truth = entry, truth
        self.category = entry["id"].rsplit("_", 1)[0]
        self.model_name = _fresh_name("play")
        self.turn = 0
        self.steps = 0
        self.decoded: list[list[list[str]]] = [[]]
        """Per user turn, per step with a decodable call, its BFCL call strings (the runner's decoded result)."""
        self.force_quit = False
        """Set by the env when a user turn ran past its step limit: BFCL fails such an entry."""
        self.finished, self.won = False, False
        self.outcome: dict[str, Any] = {}
        """After the end: `turn_verdicts` and BFCL's error fields (`bfcl`)."""

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category or "composite" in self.category

    def execute(self, calls: list[str]) -> list[str]:
        """Run one step's calls on the episode's simulators; BFCL's result string per call."""
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        results, _ = execute_multi_turn_func_call(calls, self.entry["initial_config"], self.entry["involved_classes"],
                                                  self.model_name, self.entry["id"], long_context=self.long_context,
                                                  is_evaL_run=False)
        self.decoded[self.turn].append(list(calls))
        self.steps += 1
        return results

    def next_turn(self) -> bool:
        """End the current user turn; True if another follows."""
        if self.turn + 1 >= len(self.entry["question"]):
            return False
        self.turn += 1
        self.steps = 0
        self.decoded.append([])
        return True

    @property
    def finished_turns(self) -> int:
        return len(self.decoded)

    def verdict(self, turns: int | None = None) -> dict[str, Any]:
        """BFCL's verdict on the first `turns` user turns (all by default): {"valid": bool, ...the checker's error
        fields}; an episode short of them (force-quit, or ended early) is "multi_turn:force_terminated"."""
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

        turns = len(self.truth) if turns is None else turns
        if self.force_quit or len(self.decoded) < turns:
            return {"valid": False, "error_type": "multi_turn:force_terminated",
                    "error_message": f"played {len(self.decoded)} of {turns} turns"}
        name = _fresh_name("check")
        try:
            return multi_turn_checker(self.decoded[:turns], self.truth[:turns], self.entry, self.category, name)
        finally:
            _forget(name)
            _forget(name + "_ground_truth")

    def turn_verdicts(self) -> list[bool]:
        """Per finished user turn k, whether BFCL's checker accepts turns 0..k."""
        return [bool(self.verdict(k + 1)["valid"]) for k in range(len(self.decoded))]

    def close(self) -> None:
        _forget(self.model_name)
