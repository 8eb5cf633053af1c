"""`alprl eval --bench rg:<name>,...` through the real CLI: three reasoning-gym datasets of different kinds
(basic_arithmetic, spell_backward, knights_knaves), each its own benchmark with avg@k and pass@k, graded by the
dataset's own scorer.

Two models. The session's tiny random model on the transformers engine shows the command runs end to end on a real
checkpoint (its replies are noise, so its scores are near 0). A scripted engine, put in place of the engine the CLI
builds, answers each problem once right and once partly right (partial credit from reasoning-gym where it gives
any), so every figure is known in advance: avg@2 is 0.5 on every benchmark, pass@2 is 1, and the mean reward is
the mean of reasoning-gym's scores. In both, each record's reward is recomputed from its response text with
reasoning-gym's own `get_score_answer_fn` on the same entry.
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import Future
from pathlib import Path

import pytest
from rg_answers import partly_right

pytest.importorskip("reasoning_gym", reason="reasoning-gym not installed (the rg extra)")

import reasoning_gym  # noqa: E402

from agents.engines.base import GenerationResult  # noqa: E402
from app.cli import main  # noqa: E402
from envs.boxed import extract_boxed  # noqa: E402
from envs.datasets import reasoning_gym as rg  # noqa: E402

pytestmark = pytest.mark.smoke
KINDS = ("basic_arithmetic", "spell_backward", "knights_knaves")
OPTIONS = {"eval_size": 3}  # with the defaults' size and seed: what `alprl eval` plays below
OVERRIDES = [f"env.reasoning_gym.eval_size={OPTIONS['eval_size']}"]


def entry_of(task_id: str) -> tuple[str, dict]:
    """(dataset name, entry) of a record's task id "reasoning_gym:<name>:test:<k>"."""
    _, name, split, k = task_id.split(":")
    return name, rg.load_split(rg.PREFIX + name, split, OPTIONS)[int(k)].entry


def check_records_against_reasoning_gym(out: Path) -> list[dict]:
    """Every record's reward is reasoning-gym's score of the boxed answer in its response; won is full credit."""
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for r in records:
        name, entry = entry_of(r["task_id"])
        expected = reasoning_gym.get_score_answer_fn(name)(extract_boxed(r["response"]), entry)
        assert r["bench"] == f"rg:{name}" and r["task_type"] == name
        assert r["reward"] == expected and r["won"] == (expected == 1.0), r
    return records


def eval_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", str(model), "--bench", "rg:" + ",".join(KINDS), "--mode", "single", "--k", "2",
            "--engine", "hf", "--out", str(out), "--no-progress", *extra, *OVERRIDES]


def test_a_real_tiny_model_runs_on_three_reasoning_gym_benchmarks(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(eval_argv(tiny_model_dir, out, "--tasks", "2", "--max-tokens", "8")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["benchmarks"]) == [f"rg:{name}" for name in KINDS]
    for name in KINDS:
        bench = summary["benchmarks"][f"rg:{name}"]
        assert bench["problems"] == 2 and bench["samples"] == 2 and list(bench["pass"]) == ["1", "2"]
        assert bench["source"] == f"reasoning_gym:{name}"
    assert len(check_records_against_reasoning_gym(out)) == 3 * 2 * 2
    settings = json.loads((out / "settings.json").read_text())["benchmarks"]["rg:knights_knaves"]
    assert settings["env"]["eval_dataset"] == "reasoning_gym:knights_knaves"
    assert settings["file"] == f"reasoning-gym {rg.package_version()}"
    table = capsys.readouterr().out
    assert "avg@2" in table and "pass@2" in table


class AnsweringEngine:
    """Finds the problem in each prompt and answers it right the first time it is asked, partly right the
    second (one turn each, closed by eos)."""

    concurrent_callers = False
    overlap_episodes = False
    max_model_len = 100_000

    def __init__(self, tokenizer):
        self.tok, self.asked = tokenizer, {}
        self.problems = [p for name in KINDS for p in rg.load_split(rg.PREFIX + name, "test", OPTIONS)]

    def _reply(self, prompt_ids: list[int]) -> list[int]:
        prompt = self.tok.decode(prompt_ids)
        (problem,) = [p for p in self.problems if p.question in prompt]
        times = self.asked[problem.id] = self.asked.get(problem.id, 0) + 1
        answer = problem.entry["answer"] if times == 1 else partly_right(problem.name, problem.entry)
        return self.tok.encode(f"Done.\n\\boxed{{{answer}}}", add_special_tokens=False) + [self.tok.eos_token_id]

    def submit(self, requests, *, greedy=False, seed=None):
        futures = []
        for request in requests:
            ids = self._reply(request.prompt_ids)
            future: Future = Future()
            future.set_result(GenerationResult(ids, [-0.5] * len(ids), "eos"))
            futures.append(future)
        return futures

    def close(self):
        pass


def test_every_figure_is_reasoning_gyms_scorer_on_the_replies(tiny_model_dir, tmp_path, monkeypatch):
    import app.eval_cli
    from agents.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    monkeypatch.setattr(app.eval_cli, "build_engine", lambda plan: (AnsweringEngine(tok), tok))
    out = tmp_path / "scripted"
    assert main(eval_argv(tiny_model_dir, out)) == 0
    records = check_records_against_reasoning_gym(out)
    summary = json.loads((out / "summary.json").read_text())
    for name in KINDS:
        mine = [r for r in records if r["bench"] == f"rg:{name}"]
        bench = summary["benchmarks"][f"rg:{name}"]
        assert len(mine) == 3 * 2 and bench["problems"] == 3
        assert bench["avg"] == 0.5 and bench["pass"] == {"1": 0.5, "2": 1.0}  # one full-credit reply per problem
        assert bench["reward"] == pytest.approx(statistics.fmean(r["reward"] for r in mine))
        partial = [r["reward"] for r in mine if not r["won"]]
        assert all(0 < x < 1 for x in partial) if name != "basic_arithmetic" else partial == [0.0] * 3
    assert summary["average"]["avg"] == 0.5


def test_an_unknown_dataset_is_one_line_with_the_near_matches_before_any_model_loads(tiny_model_dir, tmp_path,
                                                                                    capsys):
    out = tmp_path / "never"
    assert main(["eval", "--model", str(tiny_model_dir), "--bench", "rg:basic_arithmetic,spell_backwards",
                 "--engine", "hf", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alprl eval: error: --bench rg:spell_backwards: unknown "
                                                   "reasoning-gym dataset 'spell_backwards'; near matches: "
                                                   "spell_backward")
    assert not out.exists()


def test_names_after_rg_are_reasoning_gym_datasets_up_to_the_next_file(tmp_path):
    from app.eval_plan import parse_benches

    assert parse_benches(["rg:basic_arithmetic, spell_backward,a=F.jsonl,math", "rg:knights_knaves"]) == [
        ("rg:basic_arithmetic", "reasoning_gym:basic_arithmetic"),
        ("rg:spell_backward", "reasoning_gym:spell_backward"), ("a", "F.jsonl"), ("math", ""),
        ("rg:knights_knaves", "reasoning_gym:knights_knaves")]
