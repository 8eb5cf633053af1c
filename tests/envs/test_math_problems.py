"""Both math envs on dataset files (envs/tir/problems.py) and the single-turn env alprl/Math-v0: which file serves
which split, position indices, stable task ids, grading of a boxed answer, one load per process. Files are
written small to tmp_path in the published layouts (MATH500 JSONL, verl parquet)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/TIRMath-v0 and alprl/Math-v0)
from envs.tir import problems
from envs.tir.problems import ProblemSource
from envs.tir.tasks import generate_task
from envs.tir_defaults import DEFAULT_DIFFICULTY


def write_math500(path, n, split=None):
    """n MATH500 rows, "What is i+i?" with gold 2i; `split(i)` adds a split column."""
    rows = [{"problem": f"What is {i}+{i}?", "solution": f"\\boxed{{{2 * i}}}", "answer": f"${2 * i}$",
             "subject": "Algebra", "level": 1, "unique_id": f"test/algebra/{i}.json",
             **({"split": split(i)} if split else {})} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_verl_parquet(path, n, source="openai/gsm8k"):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"data_source": source, "prompt": [{"role": "user", "content": f"Halve {4 * i}."}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"index": 100 + i, "split": "train" if i % 2 else "test"}} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def make(env_id="alprl/TIRMath-v0", **kwargs):
    return gym.make(env_id, **kwargs).unwrapped


@pytest.mark.parametrize("env_id", ["alprl/TIRMath-v0", "alprl/Math-v0"])
def test_a_jsonl_file_serves_the_train_split_by_position(tmp_path, env_id):
    env = make(env_id, dataset=str(write_math500(tmp_path / "math500.jsonl", 5)))
    obs, info = env.reset(seed=0, options={"split": "train", "index": 3})
    assert obs == "What is 3+3?"
    assert (info["task_id"], info["task_type"], info["difficulty"]) == ("math500:test/algebra/3.json", "math500", 0)
    _, reward, terminated, _, info = env.step("So 3+3 = \\boxed{6}.")
    assert (reward, terminated, info["won"], info["extracted_answer"]) == (1.0, True, True, "6")
    env.reset(seed=0, options={"split": "train", "index": 3})
    assert env.step("\\boxed{7}")[1] == 0.0
    obs, _ = env.reset(seed=0, options={"index": 4})  # the env's own split (train)
    assert obs == "What is 4+4?"
    env.close()


def test_a_verl_parquet_file_serves_both_envs(tmp_path):
    path = str(write_verl_parquet(tmp_path / "dapo.parquet", 4))
    for env_id in ("alprl/TIRMath-v0", "alprl/Math-v0"):
        env = make(env_id, dataset=path)
        obs, info = env.reset(seed=0, options={"split": "train", "index": 2})
        assert (obs, info["task_id"], info["task_type"]) == ("Halve 8.", "dapo:102", "openai/gsm8k")
        assert env.step("\\boxed{4}")[1] == 1.0
        env.close()


def test_a_split_field_splits_one_file_and_indices_count_within_the_split(tmp_path):
    path = str(write_verl_parquet(tmp_path / "v.parquet", 6))  # odd rows train, even rows test
    env = make(dataset=path, dataset_split_field="extra_info.split")
    assert env.problems.size("train") == env.problems.size("test") == 3
    assert env.reset(seed=0, options={"split": "train", "index": 0})[0] == "Halve 4."  # row 1
    assert env.reset(seed=0, options={"split": "test", "index": 2})[0] == "Halve 16."  # row 4
    with pytest.raises(ValueError, match=r"index 3 is outside the test split of .*v.parquet \(3 problems: "
                                         r"indices 0..2\)"):
        env.reset(seed=0, options={"split": "test", "index": 3})
    with pytest.raises(ValueError, match="no rows with extra_info.split in \\('valid', 'validation'\\)"):
        env.reset(seed=0, options={"split": "valid", "index": 0})
    env.close()


def test_valid_rows_may_say_valid_or_validation(tmp_path):
    names = ["train", "valid", "validation", "test"]
    path = str(write_math500(tmp_path / "m.jsonl", 8, split=lambda i: names[i % 4]))
    source = ProblemSource(dataset=path, dataset_split_field="split")
    assert [source.size(s) for s in ("train", "valid", "test")] == [2, 4, 2]
    with pytest.raises(ValueError, match="validation split only with dataset_split_field"):
        ProblemSource(dataset=path).size("valid")


def test_eval_dataset_serves_the_test_split_and_the_training_file_is_the_fallback(tmp_path, caplog):
    train = str(write_math500(tmp_path / "train.jsonl", 6))
    held_out = str(write_verl_parquet(tmp_path / "aime.parquet", 2))
    env = make("alprl/Math-v0", dataset=train, eval_dataset=held_out)
    assert env.reset(seed=0, options={"split": "test", "index": 1})[0] == "Halve 4."
    assert env.problems.size("test") == 2 and env.problems.size("train") == 6
    only_eval = ProblemSource(eval_dataset=held_out)  # train on generated tasks, evaluate on the file
    assert only_eval.size("train") is None and only_eval.size("test") == 2
    assert only_eval.pick({"split": "train", "index": 1500}, "train", None) == generate_task("train", 1500)
    problems._WARNED.clear()
    with caplog.at_level("WARNING"):
        same = make(dataset=train)
        assert same.reset(seed=0, options={"split": "test", "index": 5})[0] == "What is 5+5?"
        same.reset(seed=0, options={"split": "test", "index": 4})
    assert caplog.text.count("evaluation runs on training problems") == 1  # logged once per process


def test_task_ids_are_stable_unique_and_reset_by_id(tmp_path):
    rows = [{"question": q, "answer": "1"} for q in "abc"] + [{"question": "d", "answer": "2", "id": "x"},
                                                              {"question": "e", "answer": "3", "id": "x"}]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = make("alprl/Math-v0", dataset=str(path))
    ids = [env.reset(seed=0, options={"index": i})[1]["task_id"] for i in range(5)]
    assert ids == ["plain:1", "plain:2", "plain:3", "plain:x", "plain:x#2"]
    assert env.reset(seed=0, options={"task_id": "plain:x#2"})[0] == "e"
    assert env.reset(seed=0, options={"task_id": "tir/test/0"})[0] == generate_task("test", 0).question


def test_random_draws_are_seeded_and_task_type_narrows_to_a_source(tmp_path):
    path = str(write_math500(tmp_path / "m.jsonl", 50))
    env = make(dataset=path)
    first = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert first == [env.reset(seed=s)[1]["task_id"] for s in range(10)] and len(set(first)) > 3
    assert env.reset(seed=0, options={"task_type": "math500"})[1]["task_type"] == "math500"
    with pytest.raises(ValueError, match="has task_type 'aime'; its task types \\(sources\\): math500"):
        env.reset(seed=0, options={"task_type": "aime"})


def test_each_file_is_loaded_once_per_process_until_it_changes(tmp_path, monkeypatch):
    calls = []
    real = problems.load_dataset
    monkeypatch.setattr(problems, "load_dataset", lambda *a, **k: calls.append(a) or real(*a, **k))
    path = write_math500(tmp_path / "once.jsonl", 4)
    for _ in range(20):  # a trainer builds prompts_per_step x group_size envs
        make(dataset=str(path)).reset(seed=0, options={"index": 0})
    assert len(calls) == 1
    write_math500(path, 7)
    assert make(dataset=str(path)).problems.size("train") == 7 and len(calls) == 2


def test_bad_files_and_options_are_one_clear_error(tmp_path):
    from envs.datasets import DatasetError

    with pytest.raises(DatasetError, match="gone.jsonl: no such file"):
        make(dataset=str(tmp_path / "gone.jsonl")).reset(seed=0)
    with pytest.raises(ValueError, match="splits `dataset`, which is not set"):
        make(dataset_split_field="split")
    (tmp_path / "bad.jsonl").write_text('{"question": "a", "answer": ""}\n')
    with pytest.raises(DatasetError, match="row 1: field 'answer': empty answer"):
        make("alprl/Math-v0", dataset=str(tmp_path / "bad.jsonl")).reset(seed=0)


def test_the_tir_expert_has_no_plan_for_a_dataset_problem(tmp_path):
    env = make(dataset=str(write_math500(tmp_path / "m.jsonl", 2)), expert=True)
    assert env.reset(seed=0, options={"index": 0})[1]["expert_plan"] == []
    assert env.reset(seed=0, options={"split": "test", "index": 0, "task_id": "tir/test/0"})[1]["expert_plan"]


# ---------------------------------------------------------------------------------------------- single turn


def test_single_turn_episode_is_one_step_graded_on_its_last_box():
    env = make("alprl/Math-v0")
    task = generate_task("test", 0, difficulty=DEFAULT_DIFFICULTY)
    obs, info = env.reset(seed=0, options={"split": "test", "index": 0})
    assert obs == task.question and info["task_id"] == task.task_id and info["step"] == 0
    obs, reward, terminated, truncated, info = env.step(f"Step by step... \\boxed{{1}} no, \\boxed{{{task.answer}}}")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["won"] and info["extracted_answer"] == task.answer and info["num_tool_calls"] == 0
    assert info["tool_statuses"] == [] and not info["void_turn"] and not info["sandbox_error"]
    after = env.step("again")  # a step after the end is a no-op
    assert after[1] == 0.0 and after[2] and after[4]["invalid_action"]


@pytest.mark.parametrize("reply", ["\\boxed{0}", "The answer is 34856448.", "\\boxed{34856448", ""])
def test_a_wrong_or_missing_box_scores_zero_and_ends_the_episode(reply):
    env = make("alprl/Math-v0")
    env.reset(seed=0, options={"split": "test", "index": 0})
    _, reward, terminated, _, info = env.step(reply)
    assert reward == 0.0 and terminated and not info["won"] and not info["void_turn"]


def test_the_math_env_and_agent_come_from_the_env_table(tiny_tokenizer, tmp_path):
    from agents.env_families import env_entry, make_agent, make_env, problem_count
    from agents.formats.tir_agent import SingleTurnMathAgent
    from envs.tir.styles import SINGLE_TURN_SYSTEM_PROMPT
    from trainer.config.train_config import EnvConfig

    cfg = EnvConfig(id="alprl/Math-v0", dataset=str(write_math500(tmp_path / "m.jsonl", 3)), task_types=["add"])
    assert env_entry("math").env_id == "alprl/Math-v0"
    env, agent = make_env(cfg), make_agent(cfg, tiny_tokenizer)
    assert env.reset(seed=0, options={"split": "train", "index": 2})[0] == "What is 2+2?"  # task_types: generated only
    assert isinstance(agent, SingleTurnMathAgent) and agent.stop_strings(0) == []
    assert agent.messages("Q")[0] == {"role": "system", "content": SINGLE_TURN_SYSTEM_PROMPT}
    assert problem_count(cfg, "train") == problem_count(cfg, "test") == 3
    assert problem_count(EnvConfig(), "test") == 500 and problem_count(EnvConfig(), "train") is None
    env.close()
