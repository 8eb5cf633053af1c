"""Household agent: prompt layout, observation format, command parsing, and a real episode through the env."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/*)
from agents.env_families import env_entry, make_agent
from agents.formats.household_agent import (
    BANNER,
    CUT_MARKER,
    HINT_PREFIX,
    HOUSEHOLD_SYSTEM_PROMPT,
    MAX_FEEDBACK_CHARS,
    TASK_PREFIX,
    UNVISITED_PREFIX,
    HouseholdAgent,
    StepContext,
    action_hints,
    command_turn,
    goal_words,
    parse_command,
    receptacle_order,
    serves_goal,
    unvisited_line,
)
from agents.models import train_tokenizer
from envs.household import expert_action


@pytest.fixture(scope="module")
def tok():
    env = gym.make("alprl/Household-v0")
    texts = [env.reset(options={"split": "test", "task_id": k})[0] for k in range(20)]
    return train_tokenizer(texts + [HOUSEHOLD_SYSTEM_PROMPT, "go to cabinet 1\n", "Nothing happens.\n> "],
                           vocab_size=400)


class _Cfg:
    id = "alprl/Household-v0"
    style = "simpletir"


def test_prompt_is_chat_then_command_opener(tok):
    agent = make_agent(_Cfg(), tok)
    assert isinstance(agent, HouseholdAgent)
    env = gym.make("alprl/Household-v0")
    obs, info = env.reset(options={"split": "test", "task_id": 0})
    text = tok.decode(agent.prompt_ids(obs, info))
    assert obs.startswith(BANNER) and BANNER not in text  # the TextWorld banner is dropped
    assert text.startswith("<|im_start|>system\n" + HOUSEHOLD_SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n"
                           "You are in the middle of a room.")
    assert text.endswith(".<|im_end|>\n<|im_start|>assistant\n> ")
    assert "\n\nYour task is to: " in text
    assert agent.stop_strings(0) == agent.stop_strings(7) == ["\n"]


def test_observation_is_text_then_next_opener_and_capped(tok):
    agent = HouseholdAgent(tok)
    obs = "You arrive at fridge 1. The fridge 1 is closed.\nActions: open fridge 1\nTask: put a cool apple in fridge."
    assert tok.decode(agent.observation_ids(obs)) == obs + "\n> "
    long = "x" * 5000
    shown = agent.observation_text(long)
    assert len(shown) == agent.max_obs_chars + len("\n> ") and shown.endswith(CUT_MARKER + "\n> ")


@pytest.mark.parametrize("text,command", [
    ("go to cabinet 1\n", "go to cabinet 1"),
    ("  open fridge 1  \n", "open fridge 1"),
    ("> take apple 1 from countertop 2\nmore", "take apple 1 from countertop 2"),
    ("\n", ""),
    ("", ""),
])
def test_parse_command(text, command):
    assert parse_command(text) == command


def test_command_turn_is_one_line():
    assert command_turn("look") == "look\n"
    for bad in ("", "  ", "go to\ndesk 1"):
        with pytest.raises(ValueError, match="one non-empty line"):
            command_turn(bad)


def test_unknown_env_lists_known(tok):
    class Other:
        id = "alprl/Nope-v0"
        style = ""

    with pytest.raises(ValueError, match="alprl/Household-v0"):
        make_agent(Other(), tok)


def test_expert_commands_round_trip_through_tokens_and_win(tok):
    """Every expert command, written as a turn and tokenized, decodes to the same command, which the env takes."""
    agent = HouseholdAgent(tok)
    env = gym.make("alprl/Household-v0")
    for k in range(10):
        _, info = env.reset(options={"split": "test", "task_id": k})
        while True:
            command = expert_action(env)
            assert agent.decode(agent.turn_ids(command_turn(command))) == command
            assert command in info["admissible_commands"]
            _, reward, term, trunc, info = env.step(agent.decode(agent.turn_ids(command_turn(command))))
            if term or trunc:
                break
        assert term and reward == 1.0


def test_invalid_decoded_text_costs_a_step_not_a_crash(tok):
    agent = HouseholdAgent(tok)
    env = gym.make("alprl/Household-v0", max_steps=2)
    env.reset(options={"split": "test", "task_id": 0})
    obs, reward, term, trunc, info = env.step(agent.decode(tok.encode("<think> hm </think>\n")))
    assert obs == "Nothing happens." and info["invalid_action"] and not (term or trunc)
    *_, trunc, _ = env.step(agent.decode(tok.encode("???")))
    assert trunc


def test_hints_list_what_acts_here_and_nothing_else():
    assert action_hints(["go to desk 1", "examine desk 1", "help", "inventory", "look"]) == ""
    assert action_hints(["close drawer 1", "go to desk 1", "take pen 1 from drawer 1"]) == (
        "\nActions: close drawer 1, take pen 1 from drawer 1")


def test_hints_keep_only_the_commands_that_serve_the_goal():
    goal = goal_words("put a clean apple in fridge.")
    assert goal == {"put", "a", "clean", "apple", "in", "fridge"}
    commands = ["close drawer 1", "open drawer 2", "take apple 2 from drawer 1", "take pen 1 from drawer 1",
                "move apple 2 to drawer 1", "move apple 2 to fridge 1", "clean apple 2 with sinkbasin 1",
                "heat apple 2 with microwave 1", "use desklamp 1", "go to fridge 1"]
    assert action_hints(commands, goal) == (
        "\nActions: open drawer 2, take apple 2 from drawer 1, move apple 2 to fridge 1, "
        "clean apple 2 with sinkbasin 1, heat apple 2 with microwave 1")
    lamp = goal_words("examine the basketball with the desklamp")
    assert action_hints(["use desklamp 1", "use floorlamp 1", "take basketball 1 from sofa 1"], lamp) == (
        "\nActions: use desklamp 1, take basketball 1 from sofa 1")
    assert action_hints(["close drawer 1", "take pen 1 from drawer 1"], lamp) == ""


def test_step_context_restates_the_task_and_lists_what_acts(tok):
    env = env_entry("alprl/Household-v0").wrap(gym.make("alprl/Household-v0"))
    assert isinstance(env, StepContext)
    assert not isinstance(env_entry("alprl/WebShop-v0").wrap(gym.make("alprl/WebShop-v0")), StepContext)
    raw = gym.make("alprl/Household-v0")
    first, _ = env.reset(options={"split": "test", "task_id": 1})
    raw_first, _ = raw.reset(options={"split": "test", "task_id": 1})
    assert first == raw_first  # the reset observation is the env's own
    goal = first.split("Your task is to: ")[1]
    hinted = 0
    for _ in range(13):
        command = expert_action(env)
        obs, reward, term, trunc, info = env.step(command)
        raw_obs, *_ = raw.step(command)
        if term:
            break
        head, _, task = obs.rpartition(TASK_PREFIX)
        assert task == goal and not goal.endswith("\n")
        head = head.partition(UNVISITED_PREFIX)[0]
        feedback, _, listed = head.partition(HINT_PREFIX)
        assert feedback == raw_obs
        for hint in filter(None, listed.split(", ")):
            assert hint in info["admissible_commands"] and serves_goal(hint, goal_words(goal))
            hinted += 1
    assert term and reward == 1.0 and hinted > 0
    obs, *_ = env.step("help")  # after the end: "Nothing happens.", still with the task line
    assert obs.startswith("Nothing happens.") and obs.endswith(TASK_PREFIX + goal)


def test_not_visited_lists_receptacles_in_order_until_gone_to():
    env = env_entry("alprl/Household-v0").wrap(gym.make("alprl/Household-v0"))
    _, info = env.reset(options={"split": "test", "task_id": 2})
    room = [c.removeprefix("go to ") for c in info["admissible_commands"] if c.startswith("go to ")]
    expected = sorted(room, key=receptacle_order)
    assert len(expected) > 3

    def unvisited(obs: str) -> list[str]:  # ranges expanded
        line = obs.partition(UNVISITED_PREFIX)[2].partition("\n")[0]
        names = []
        for part in filter(None, line.split(", ")):
            kind, _, indices = part.rpartition(" ")
            first, _, last = indices.partition("-")
            names += [f"{kind} {i}" for i in range(int(first), int(last or first) + 1)]
        return names

    obs, *_ = env.step("go to nowhere 1")  # not admissible: nothing was visited
    assert obs.startswith("Nothing happens.") and unvisited(obs) == expected
    obs, *_ = env.step("look")
    assert unvisited(obs) == expected
    for name in (expected[2], expected[0], expected[2]):  # going twice changes nothing
        obs, *_ = env.step(f"  go to {name}  ")
        expected = [r for r in expected if r != name]
        assert obs.startswith(f"You arrive at {name}.") and unvisited(obs) == expected
    for name in expected:
        obs, *_ = env.step(f"go to {name}")
    assert UNVISITED_PREFIX not in obs  # all gone to: the line disappears
    env.reset(options={"split": "test", "task_id": 2})  # a reset forgets the visits
    assert len(unvisited(env.step("look")[0])) == len(room)


def test_not_visited_line_writes_consecutive_indices_as_ranges():
    names = ["armchair 1", "cabinet 1", "cabinet 2", "cabinet 3", "cabinet 5", "drawer 2", "drawer 3", "sofa 1"]
    assert unvisited_line(names) == "\nNot visited: armchair 1, cabinet 1-3, cabinet 5, drawer 2-3, sofa 1"
    assert unvisited_line(["cabinet 10", "cabinet 11"]) == "\nNot visited: cabinet 10-11"
    assert unvisited_line([]) == ""


def test_receptacle_order_sorts_by_type_then_numeric_index():
    names = ["cabinet 10", "cabinet 2", "armchair 1", "drawer 1", "cabinet 1"]
    assert sorted(names, key=receptacle_order) == ["armchair 1", "cabinet 1", "cabinet 2", "cabinet 10", "drawer 1"]


def test_long_feedback_is_cut_before_the_task_line():
    env = env_entry("alprl/Household-v0").wrap(gym.make("alprl/Household-v0"))
    env.reset(options={"split": "test", "task_id": 0})
    obs, *_ = env.step("help")  # ALFWorld's help text is ~870 characters
    feedback = obs.partition(HINT_PREFIX)[0].partition(UNVISITED_PREFIX)[0].partition(TASK_PREFIX)[0]
    assert len(feedback) == MAX_FEEDBACK_CHARS and feedback.endswith(CUT_MARKER)
