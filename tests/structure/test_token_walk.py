"""The walk of one sampled token from the engine's result to the loss (docs/architecture.md, "One sampled token").

Each step is a function a newcomer reads, in the order the step runs it; every link is checked against the source:
the caller's body calls the callee, and the name it calls is defined in (or imported from) the callee's file. The
walk must touch at most nine files and come back to none but the loop, so a concern split back into a "once per
batch" and a "per micro-batch" half in another file breaks this test.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = "trainer/loop.py"
MAX_FILES = 9


@dataclass(frozen=True)
class Step:
    file: str
    function: str  # qualified: Class.method or function
    calls: dict[str, str] = field(default_factory=dict)  # name called in the body → the file that defines it


ENGINE, ROLLOUT, TRAJ = "agents/engines/vllm.py", "agents/rollout.py", "agents/trajectory.py"
TYPES, LOGPROBS = "trainer/objective/types.py", "trainer/objective/logprobs.py"
CORRECTIONS, UPDATE, LOSSES = "trainer/objective/corrections.py", "trainer/update.py", "trainer/objective/losses.py"

WALK = [
    Step(ENGINE, "VLLMEngine._result", {"sampled_logprobs": ENGINE}),
    Step(ROLLOUT, "run_episodes", {"_drive": ROLLOUT}),
    Step(ROLLOUT, "_drive", {"submit": ENGINE, "act": ROLLOUT, "_absorb": ROLLOUT}),
    Step(ROLLOUT, "_Episode.act", {"take_turn": ROLLOUT}),
    Step(ROLLOUT, "_Episode.take_turn", {"append_turn": TRAJ}),
    # after the env step: a prompt that does not extend the stream starts the episode's next trace (a new row)
    Step(ROLLOUT, "_absorb", {"start_trace": TRAJ, "append": TRAJ}),
    Step(TRAJ, "Trajectory.append_turn", {"append": TRAJ}),
    Step(TRAJ, "Trajectory.append"),
    Step(TRAJ, "Trajectory.start_trace"),
    Step(LOOP, "train_step", {"collect_step": LOOP, "learn": LOOP}),
    Step(LOOP, "collect_step", {"run_episodes": ROLLOUT}),
    Step(LOOP, "learn", {"prepare_batch": LOOP, "update": LOOP}),
    Step(LOOP, "prepare_batch", {"collate": TYPES, "old_logprobs": LOGPROBS, "prepare_corrections": CORRECTIONS}),
    Step(TYPES, "collate"),
    Step(LOGPROBS, "old_logprobs", {"clean_forward": LOGPROBS}),
    Step(LOGPROBS, "clean_forward", {"compute_logprobs": LOGPROBS}),
    Step(LOGPROBS, "compute_logprobs"),
    Step(CORRECTIONS, "prepare_corrections", {"compute_correction": CORRECTIONS}),
    Step(CORRECTIONS, "compute_correction"),
    Step(LOOP, "update", {"update_policy": UPDATE}),
    # the update's forward is compute_logprobs again (with grad): a function already read, not a new visit
    Step(UPDATE, "update_policy", {"compute_logprobs": LOGPROBS, "micro_batch_objective": UPDATE}),
    Step(UPDATE, "micro_batch_objective", {"get_policy_loss": LOSSES, "aggregate": LOSSES}),
    Step(LOSSES, "get_policy_loss"),
    Step(LOSSES, "aggregate"),
]


def parse(file: str) -> ast.Module:
    return ast.parse((ROOT / file).read_text())


def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = tree.body
    *classes, name = qualname.split(".")
    for cls in classes:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls).body
    found = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{qualname} is not defined where the walk expects it"
    return found[0]


def called_names(fn: ast.FunctionDef) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            out.add(node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", ""))
    return out


def defined_names(tree: ast.Module) -> set[str]:
    """Top-level functions and the methods of top-level classes."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
    return names


def imported_from(tree: ast.Module) -> dict[str, str]:
    """Local name → the file it is imported from (`from a.b import c` → a/b.py)."""
    return {alias.asname or alias.name: node.module.replace(".", "/") + ".py"
            for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names}


def test_every_link_of_the_walk_is_a_real_call():
    for step in WALK:
        tree = parse(step.file)
        fn = find_function(tree, step.function)
        calls, imports, local = called_names(fn), imported_from(tree), defined_names(tree)
        for name, target in step.calls.items():
            assert name in calls, f"{step.file} {step.function} no longer calls {name}"
            if target == step.file:
                assert name in local, f"{name} is not defined in {step.file}"
            elif name in imports:
                assert imports[name] == target, f"{step.file} imports {name} from {imports[name]}, not {target}"
            else:  # a method call on an object of the target file's class
                assert name in defined_names(parse(target)), f"{target} defines no {name}"


def test_the_engine_result_is_what_the_rollout_acts_on():
    result = find_function(parse(ENGINE), "VLLMEngine._result")
    for method in ("_Episode.act", "_Episode.take_turn"):
        fn = find_function(parse(ROLLOUT), method)
        assert ast.unparse(result.returns) == "GenerationResult"
        assert "GenerationResult" in {ast.unparse(a.annotation) for a in fn.args.args if a.annotation}


def test_each_step_is_called_by_another_and_read_once():
    roots = {(ENGINE, "VLLMEngine._result"), (LOOP, "train_step")}  # joined by the rollout's engine call
    steps = [(step.file, step.function) for step in WALK]
    assert len(steps) == len(set(steps)), "a function appears twice in the walk"
    for step in WALK:
        name = step.function.split(".")[-1]
        if (step.file, step.function) not in roots:
            assert any(s.calls.get(name) == step.file for s in WALK), f"nothing in the walk calls {step.function}"
    # the only call (from outside the loop) back to a function read earlier in another file: the update's forward
    back = {(t, n) for i, s in enumerate(WALK) for n, t in s.calls.items()
            if LOOP not in (s.file, t) and t != s.file and any((w.file, w.function.split(".")[-1]) == (t, n) for w in WALK[:i])}
    assert back == {(LOGPROBS, "compute_logprobs")}


def test_the_walk_touches_at_most_nine_files_and_comes_back_only_to_the_loop():
    files = [step.file for step in WALK]
    visits = [file for file, _ in groupby(files)]
    assert len(set(files)) <= MAX_FILES, f"the token walk touches {len(set(files))} files: {sorted(set(files))}"
    again = {f for f in visits if f != LOOP and visits.count(f) > 1}
    assert not again, f"the walk comes back to {sorted(again)}; only the loop may be entered twice"


def test_the_micro_batch_update_is_one_short_function():
    fn = find_function(parse(UPDATE), "update_policy")
    params = len(fn.args.posonlyargs) + len(fn.args.args) + len(fn.args.kwonlyargs)
    assert fn.end_lineno - fn.lineno + 1 <= 40 and params <= 9, (
        f"update_policy is {fn.end_lineno - fn.lineno + 1} lines with {params} parameters (at most 40 and 9: attach "
        "new diagnostics through the RatioProbe)")
