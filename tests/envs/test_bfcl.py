"""`alprl/BFCL-v0` against BFCL itself: the `bfcl-eval` package's data, simulators and multi-turn checker, unchanged.

A scripted agent replaying each entry's ground-truth calls (as hermes tool calls, through the env's text interface)
must score 100% by BFCL's checker on a sample of every category; a wrong call must fail the turn BFCL's checker fails;
the simulators' state must stay per episode.
"""

from __future__ import annotations

import json

import pytest

from envs.bfcl import CATEGORIES, BFCLEnv, entries, ground_truth, hermes_text
from envs.bfcl.calls import call_string, parse_calls
from envs.bfcl.expert import expert_turns

SAMPLE = (0, 37, 101, 163, 199)  # entries of each category, spread over its 200


def _play(env: BFCLEnv, turns: list[list[str]]) -> tuple[float, dict, list[str]]:
    observations = []
    for turn in turns:
        for text in turn:
            obs, reward, terminated, truncated, info = env.step(text)
            observations.append(obs)
            if terminated or truncated:
                return reward, info, observations
    raise AssertionError("the episode did not end after its last user turn")


@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_replay_scores_every_sampled_entry_by_bfcls_checker(category):
    env = BFCLEnv(categories=[category])
    for k in SAMPLE:
        env.reset(options={"task_id": k})
        entry = env.session.entry
        reward, info, _ = _play(env, expert_turns(entry, env.session.truth))
        assert reward == 1.0 and info["won"], (entry["id"], info["bfcl"])
        assert info["turn_verdicts"] == [True] * len(entry["question"])
        assert info["entry_id"] == entries(category)[k]["id"] and info["task_type"] == category
    env.close()


def test_a_wrong_argument_fails_the_turn_bfcl_fails():
    env = BFCLEnv(categories=["base"])
    env.reset(options={"task_id": 0})
    truth = env.session.truth
    assert truth[0] == ["cd(folder='document')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', "
                                                                             "destination='temp')"]
    turns = expert_turns(env.session.entry, truth)
    turns[0][0] = turns[0][0].replace('"dir_name": "temp"', '"dir_name": "tmp"')  # the directory the user named: temp
    reward, info, observations = _play(env, turns)
    assert reward == 0.0 and not info["won"]
    assert info["turn_verdicts"][0] is False  # the first turn fails, and with it every prefix after
    assert info["bfcl"]["error_type"].startswith("multi_turn:")
    assert "mkdir(dir_name='tmp')" in observations[0]  # executed on the simulator as written
    # the env's verdict is BFCL's checker on the calls the episode made
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    direct = multi_turn_checker(env.session.decoded, truth, env.session.entry, "multi_turn_base", "direct_check")
    assert direct["valid"] is False and direct["error_type"] == info["bfcl"]["error_type"]
    env.close()


def test_a_turn_without_calls_where_bfcl_expects_calls_fails_only_from_that_turn():
    env = BFCLEnv(categories=["base"])
    env.reset(options={"task_id": 0})
    turns = expert_turns(env.session.entry, env.session.truth)
    turns[1] = ["Done."]  # skip the second user turn's calls
    reward, info, _ = _play(env, turns)
    assert reward == 0.0 and info["turn_verdicts"][0] is True and info["turn_verdicts"][1] is False
    assert info["bfcl"]["error_type"] == "multi_turn:empty_turn_model_response"


def test_calls_run_on_the_simulators_and_come_back_as_tool_messages():
    env = BFCLEnv(categories=["base"])
    obs, info = env.reset(options={"task_id": 0})
    assert obs.startswith("Move 'final_report.pdf'") and info["messages"][0]["role"] == "user"
    names = {t["function"]["name"] for t in info["tools"]}
    assert {"cd", "mkdir", "mv", "grep"} <= names
    assert all(t["function"]["parameters"]["type"] == "object" for t in info["tools"])
    obs, reward, terminated, truncated, info = env.step(
        "I will look." + hermes_text("cd", {"folder": "document"}) + hermes_text("ls", {}))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert [m["name"] for m in info["messages"]] == ["cd", "ls"]
    assert all(m["role"] == "tool" for m in info["messages"])
    assert "final_report.pdf" in json.loads(info["messages"][1]["content"])["current_directory_content"]
    assert info["turn"] == 0 and not info["invalid_action"]
    env.close()


def test_malformed_and_unsafe_calls_are_reported_and_never_run():
    env = BFCLEnv(categories=["base"])
    env.reset(options={"task_id": 0})
    text = ('<tool_call>{"name": "__import__(\'os\').system", "arguments": {"command": "echo pwned"}}</tool_call>'
            '<tool_call>{not json}</tool_call>' + hermes_text("cd", {"folder": "document"}))
    calls, bad = parse_calls(text)
    assert calls == [("cd", {"folder": "document"})] and len(bad) == 2
    obs, _, _, _, info = env.step(text)
    assert info["invalid_action"] and len(info["invalid_calls"]) == 2
    assert "invalid tool call" in obs and env.session.decoded[0] == [["cd(folder='document')"]]
    assert call_string("mkdir", {"dir_name": "te'mp"}) == "mkdir(dir_name=\"te'mp\")"  # repr: always a literal
    env.close()


def test_miss_func_adds_its_held_out_functions_at_their_turn():
    env = BFCLEnv(categories=["miss_func"])
    _, info = env.reset(options={"task_id": 0})
    entry = env.session.entry
    (turn, added), = entry["missed_function"].items()
    before = {t["function"]["name"] for t in info["tools"]}
    assert not before & {d["name"] for d in added}
    turns = expert_turns(entry, env.session.truth)
    for k in range(int(turn)):
        for text in turns[k]:
            _, _, _, _, info = env.step(text)
    assert info["tools_changed"] and info["messages"] == [{"role": "user", "content": "I have updated some more "
                                                           "functions you can choose from. What about now?"}]
    assert {d["name"] for d in added} <= {t["function"]["name"] for t in info["tools"]}
    env.close()


def test_two_episodes_of_one_entry_keep_their_own_simulator_state():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    a, b = BFCLEnv(categories=["base"]), BFCLEnv(categories=["base"])
    a.reset(options={"task_id": 0})
    b.reset(options={"task_id": 0})
    a.step(hermes_text("cd", {"folder": "document"}) + hermes_text("mkdir", {"dir_name": "only_in_a"}))
    _, _, _, _, info = b.step(hermes_text("cd", {"folder": "document"}) + hermes_text("ls", {}))
    assert "only_in_a" not in info["messages"][1]["content"]
    names = (a.session.model_name, b.session.model_name)
    assert any(k.startswith(names) for k in vars(multi_turn_utils))
    a.close()
    b.close()
    assert not [k for k in vars(multi_turn_utils) if k.startswith(names)]  # nothing cached past an episode


def test_ground_truth_covers_every_entry():
    for category in CATEGORIES:
        truth = ground_truth(category)
        assert len(entries(category)) == len(truth) == 200
        assert all(len(truth[e["id"]]) == len(e["question"]) for e in entries(category))
