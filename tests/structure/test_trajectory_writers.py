"""One writer per trajectory field: outside agents/trajectory.py no library code assigns a Trajectory's reward,
group id, tokens, mask or rollout log-probs; it asks the Trajectory (`grade`, `shape_reward`, `regroup`,
`append_turn`, `mask_out`, `mark_infra_failure`), so each change of an episode's data has one place to read.

Construction (`Trajectory(prompt_ids=..., group_id=...)`) is not an assignment and stays allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "envs", "trainer", "evaluation", "app", "sandbox")
OWNER = "agents/trajectory.py"
FIELDS = {"reward", "group_id", "response_ids", "loss_mask", "rollout_logprobs", "turn_spans", "turn_states",
          "token_versions"}


def field_writes(source: str) -> list[tuple[int, str]]:
    """(line, field) of every assignment, augmented assignment or annotated assignment to `<expr>.<field>`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for leaf in ast.walk(target):  # tuple targets: a.reward, b.group_id = ...
                if isinstance(leaf, ast.Attribute) and leaf.attr in FIELDS and isinstance(leaf.ctx, ast.Store):
                    found.append((node.lineno, leaf.attr))
    return found


def test_the_scan_finds_each_form_of_write():
    source = "t.reward = 1\nt.reward += 2\na.group_id, b.loss_mask = 0, []\nt.turn_spans: list = []\nx = t.reward\n"
    assert field_writes(source) == [(1, "reward"), (2, "reward"), (3, "group_id"), (3, "loss_mask"),
                                    (4, "turn_spans")]


def test_only_the_trajectory_writes_its_fields():
    writes = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name != OWNER and (found := field_writes(path.read_text())):
                writes[name] = found
    assert not writes, f"assignments to Trajectory fields outside {OWNER} (use its methods): {writes}"
