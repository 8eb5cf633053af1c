"""TIRMathEnv episodes with the real LocalExecutor: code turns, answers, void turns, limits, modes, failures."""

from __future__ import annotations

import pickle
import random
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from envs.tir.env import TIRMathEnv, to_observation
from envs.tir.styles import TIMEOUT_MESSAGE
from envs.tir.tasks import generate_task
from envs.tir_defaults import DEFAULT_DIFFICULTY
from trainer.config.train_config import EnvConfig

INFO_KEYS = {"admissible_commands", "won", "task_score", "task_id", "task_type", "step", "invalid_action",
             "void_turn", "num_tool_calls", "tool_statuses", "sandbox_error"}
TASK = generate_task("test", 0)  # "Compute 8448 * 4126." -> 34856448


def make(**kwargs) -> TIRMathEnv:
    return gym.make("alprl/TIRMath-v0", **kwargs).unwrapped


def block(code: str) -> str:
    return f"Let me check.\n```python\n{code}\n```\n"


def start(env: TIRMathEnv, task=TASK) -> str:
    obs, info = env.reset(seed=0, options={"task_id": task.task_id})
    assert obs == task.question and info["step"] == 0 and INFO_KEYS <= set(info)
    return obs


def test_code_turn_then_correct_answer():
    env = make()
    start(env)
    obs, reward, term, trunc, info = env.step(block("print(8448 * 4126)"))
    assert obs == "\nCode execution result: 34856448\n"
    assert (reward, term, trunc) == (0.0, False, False)
    assert info["num_tool_calls"] == 1 and info["tool_statuses"] == ["Success"] and info["step"] == 1
    obs, reward, term, trunc, info = env.step("The answer is \\boxed{34856448}.")
    assert (obs, reward, term, trunc) == ("", 1.0, True, False)
    assert info["won"] is True and info["task_score"] == 1.0 and info["extracted_answer"] == "34856448"
    assert type(reward) is float and type(term) is bool and type(trunc) is bool


def test_wrong_answer_without_tool():
    env = make()
    start(env)
    _, reward, term, trunc, info = env.step("I guess \\boxed{34856000}.")
    assert (reward, term, trunc, info["won"], info["num_tool_calls"]) == (0.0, True, False, False, 0)


def test_box_and_code_in_one_turn_grades_without_running_code():
    env = make()
    start(env)
    _, reward, term, _, info = env.step("So \\boxed{34856448}\n```python\nprint(1)\n```\n")
    assert (reward, term, info["num_tool_calls"]) == (1.0, True, 0)


def test_void_turn_ends_the_episode():
    env = make()
    start(env)
    obs, reward, term, trunc, info = env.step("I am not sure what to do.")
    assert (obs, reward, term, trunc) == ("", 0.0, True, False)
    assert info["void_turn"] and info["invalid_action"]
    # stepping a finished episode is a no-op, not an error
    assert env.step("\\boxed{34856448}")[1:4] == (0.0, True, False)


def test_max_turns_truncates_and_later_steps_are_no_ops():
    env = make(max_turns=2)
    start(env)
    assert env.step(block("print(1)"))[2:4] == (False, False)
    obs, reward, term, trunc, info = env.step(block("print(2)"))
    assert (obs, reward, term, trunc) == ("\nCode execution result: 2\n", 0.0, False, True)
    assert env.step(block("print(3)"))[1:4] == (0.0, False, True)
    assert env.step("x")[4]["num_tool_calls"] == 2


def test_simpletir_final_answer_in_stdout_is_graded():
    env = make()
    start(env)
    obs, reward, term, _, info = env.step(block("final_answer(8448 * 4126)"))
    assert obs == "\nCode execution result: \\boxed{34856448}\n"
    assert (reward, term, info["extracted_answer"]) == (1.0, True, "34856448")


def test_torl_tool_budget_then_final_round():
    env = make(style="torl", max_turns=6)
    start(env)
    turn = "Compute.\n```python\nprint(7)\n```\n```output"
    for _ in range(3):
        obs, *_ = env.step(turn)
        assert obs == "\n7\n```\n"
    assert env.step(turn)[2:4] == (False, True)  # a 4th tool call is over budget
    start(env)
    for _ in range(3):
        env.step(turn)
    final = "```python\nprint(8448 * 4126)\n```\n```output\n34856448\n```\nSo \\boxed{34856448}."
    assert env.step(final)[1:3] == (1.0, True)


def test_hermes_episode():
    env = make(style="hermes")
    start(env)
    turn = 'Run it.\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "8448 * 4126"}}\n</tool_call>'
    assert env.step(turn)[0] == "<tool_response>\n34856448\n</tool_response>"
    assert env.step("\\boxed{34856448}")[1] == 1.0


def test_stateless_mode_forgets_and_replay_mode_remembers():
    env = make()
    start(env)
    env.step(block("a = 41"))
    assert env.step(block("print(a + 1)"))[0] == "\nCode execution result: NameError: name 'a' is not defined\n"
    env = make(exec_mode="replay")
    start(env)
    first = env.step(block("import random\na = random.random()\nprint(a)"))[0]
    env.step(block("print(1 / 0)"))  # failed blocks are not replayed
    obs, _, _, _, info = env.step(block("print(a)"))
    assert obs == first and info["replay_failed"] is False and info["tool_statuses"] == ["Success", "Failed",
                                                                                          "Success"]


def test_replay_failure_falls_back_to_stateless_and_is_flagged():
    env = make(exec_mode="replay")
    start(env)
    env.step(block("import sys\nsys.exit(0)"))  # succeeds alone, but aborts every replay
    obs, _, _, _, info = env.step(block("print(5)"))
    assert obs == "\nCode execution result: 5\n" and info["replay_failed"] is True


def test_timeout_is_reported_and_the_env_goes_on():
    env = make(run_timeout_s=0.5)
    start(env)
    obs, _, term, trunc, info = env.step(block("while True:\n    pass"))
    assert obs == f"\nCode execution result: {TIMEOUT_MESSAGE}\n"
    assert info["tool_statuses"] == ["TimeLimitExceeded"] and not (term or trunc) and not info["sandbox_error"]


class UnreachableSandbox:
    """Stands in for an HTTP sandbox that is down (the in-process executor cannot be made unreachable)."""

    def run(self, code, *, timeout_s=3.0, memory_limit_mb=1024, stdin=""):
        raise ConnectionError("connection refused")

    def close(self):
        pass


def test_sandbox_failure_is_an_error_observation_never_an_exception():
    env = TIRMathEnv(runner=UnreachableSandbox())
    start(env)
    obs, reward, term, trunc, info = env.step(block("print(1)"))
    assert "SandboxError: ConnectionError: connection refused" in obs
    assert info["sandbox_error"] is True and info["tool_statuses"] == ["SandboxError"] and not (term or trunc)
    assert env.step(block("print(2)"))[4]["sandbox_error"] is True


def test_unicode_output_and_problems_keep_their_characters():
    """Tool output and problem text reach the agent as written, not as escapes such as \\u00e9."""
    env = make()
    start(env)
    obs = env.step(block("print('Écrivez la réponse — 分数で', '√2', '\\U0001F600')"))[0]
    assert obs == "\nCode execution result: Écrivez la réponse — 分数で √2 \U0001F600\n"
    assert obs in env.observation_space
    lone_surrogate = env.step(block("print(1)"))[0].replace("1", "\ud800")
    assert lone_surrogate not in env.observation_space  # UTF-8 cannot encode it, no tokenizer takes it
    assert to_observation("a\ud800b") == "a\ufffdb"


def test_unicode_problem_text_is_the_first_observation(tmp_path):
    problems = tmp_path / "fr.jsonl"
    problems.write_text('{"question": "Écrivez la réponse — 分数で: 1/2 + 1/3 ?", "answer": "5/6"}\n',
                        encoding="utf-8")
    env = make(dataset=str(problems))
    obs, _ = env.reset(seed=0, options={"index": 0})
    assert obs == "Écrivez la réponse — 分数で: 1/2 + 1/3 ?" and obs in env.observation_space


PIECES = ["```python\n", "```py\n", "\n```\n", "```", "print(1)", "final_answer(2)", "\\boxed{", "\\fbox{", "}", "{",
          "<tool_call>", "</tool_call>", '{"name": "code_interpreter", "arguments": {"code": "3"}}', "```output",
          "\x00", "\ud800", "é", "\n", " ", "1/0", "x" * 40, "import os\nos.getcwd()"]


CODE_PIECES = ["print(1)", "1/0", "\x00", "\ud800", "final_answer(2)", "x", "\n", "'\\boxed{'", "print('é' * 3000)",
               "import sys; sys.stderr.write('e' * 999)", "print(chr(0))", "  ", "```", "</tool_call>"]


@pytest.mark.parametrize("style", ["simpletir", "torl", "hermes"])
def test_garbage_text_never_raises(style):
    env = make(style=style, max_turns=3)
    rng = random.Random(style)
    calls = 0
    for episode in range(25):
        env.reset(seed=episode)
        for _ in range(3):
            action = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 10)))
            if rng.random() < 0.6:  # a well-formed tool call around random code, with random text around it
                code = "".join(rng.choice(CODE_PIECES) for _ in range(rng.randint(0, 4)))
                action = rng.choice(PIECES) + env.style.format_tool_call(code) + action * rng.randint(0, 1)
            obs, reward, term, trunc, info = env.step(action)
            assert obs in env.observation_space and reward in (0.0, 1.0)
            pickle.dumps(info)
            if term or trunc:
                break
        calls += info["num_tool_calls"]
    assert calls >= 15  # the fuzz really reaches the sandbox, not only the parser
    env.reset(seed=0)
    for weird in [None, b"\\boxed{1}", 12, "\x00" * 10, "\ud800\udfff", "}" * 70_000]:
        env.reset(seed=0)
        env.step(weird)  # type: ignore[arg-type]


def test_gym_make_plays_the_episode_the_run_config_names_by_default():
    """`gym.make` without arguments and `alprl train` without overrides play the same episode: one constant writes
    each default for both (envs/tir_defaults.py, sandbox/settings.py)."""
    e, env, single = EnvConfig(), make(), gym.make("alprl/Math-v0").unwrapped
    assert (env.style.name, env.max_turns, env.difficulty, env.run_timeout_s) == \
        (e.style, e.max_turns, e.difficulty, e.run_timeout_s)
    assert single.problems.difficulty == env.problems.difficulty == e.difficulty


def test_reset_seeding_and_options():
    env = make(split="test")
    a, b = env.reset(seed=7), env.reset(seed=7)
    assert a == b
    index = int(a[1]["task_id"].split("/")[2])
    assert a[1]["difficulty"] == DEFAULT_DIFFICULTY  # the run config's level when none is named
    assert 0 <= index < 500 and a[0] == generate_task("test", index, difficulty=DEFAULT_DIFFICULTY).question
    assert env.reset(seed=8)[1]["task_id"] != a[1]["task_id"]
    obs, info = env.reset(seed=1, options={"split": "valid", "index": 600, "task_type": "modpow"})
    assert info["task_type"] == "modpow" and info["task_id"] == "tir/valid/600/d1/tmodpow"
    train = make()
    assert int(train.reset(seed=3)[1]["task_id"].split("/")[2]) >= 1500
    with pytest.raises(ValueError, match="not in split 'train'"):
        train.reset(options={"index": 3})
    with pytest.raises(ValueError, match="valid task types"):
        train.reset(options={"task_type": "geometry"})
    with pytest.raises(ValueError, match="'index' must be an int"):
        train.reset(options={"index": "first"})
    with pytest.raises(RuntimeError, match="before reset"):
        make().step("x")


@pytest.mark.parametrize("kwargs,match", [({"style": "react"}, "valid styles"),
                                          ({"exec_mode": "session"}, "'stateless', 'replay'"),
                                          ({"split": "dev"}, "'train'"), ({"max_turns": 0}, "max_turns"),
                                          ({"difficulty": 5}, "difficulty"), ({"task_types": ["x"]}, "valid task")])
def test_bad_constructor_arguments_are_one_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TIRMathEnv(**kwargs)


def _values(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _values(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _values(v)
    else:
        yield obj


def test_gold_answer_never_in_reset_obs_or_info_even_with_expert():
    env = make(split="test", expert=True, difficulty=None)  # every level: the long answers are the harder ones
    checked = 0
    for seed in range(60):
        obs, info = env.reset(seed=seed)
        task = generate_task("test", int(info["task_id"].split("/")[2]))
        assert task.answer not in list(_values(info)) and "answer" not in info
        assert info["expert_plan"] and task.solution_code in info["expert_plan"][0]
        if len(task.answer) >= 5 and task.answer not in task.question:
            assert task.answer not in repr(info) and task.answer not in obs
            checked += 1
    assert checked > 20


def test_threaded_envs_grade_correctly():
    tasks = [generate_task("test", i) for i in range(8)]
    envs_ = [make() for _ in tasks]

    def play(k):
        env, task = envs_[k], tasks[k]
        env.reset(seed=k, options={"task_id": task.task_id})
        guess = task.answer if k % 2 == 0 else task.answer + "1"
        return env.step(f"\\boxed{{{guess}}}")[1]

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(play, range(8))) == [1.0, 0.0] * 4


def test_render_and_close():
    env = make(render_mode="ansi")
    start(env)
    assert env.render() == TASK.question
    env.close()
    env.close()
    obs, _, _, _, info = env.step(block("print(1)"))  # a closed env answers with an error, never raises
    assert info["sandbox_error"] and "SandboxError" in obs



def test_vector_env_group_shares_a_task():
    # A GRPO group = G envs reset with the same seed; DISABLED autoreset as LLM rollouts use (§0.5).
    vec = gym.make_vec("alprl/TIRMath-v0", num_envs=3, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED})
    obs, info = vec.reset(seed=[5, 5, 5])
    assert len(set(obs)) == 1 and len(set(info["task_id"])) == 1
    obs, reward, term, trunc, info = vec.step((block("print(6 * 7)"), "no idea", block("print(1)")))
    assert obs[0] == "\nCode execution result: 42\n" and obs[1] == "" and list(term) == [False, True, False]
    vec.close()
