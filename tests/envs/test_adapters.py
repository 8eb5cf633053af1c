"""The adapters to the real ALFWorld and WebShop (envs/adapters/).

Without what they need (this machine cannot download ALFWorld's game files or the WebShop data), creating them
fails with one line naming what is missing: checked for real. Their episodes are checked against stand-ins
(tests/envs/adapter_stand_ins.py): ALFWorld's folder layout with game files played by the generated household,
and AgentGym's WebShop HTTP API served for real by uvicorn on a loopback port over generated shops.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from adapter_stand_ins import GAMES_PER_SPLIT, HouseholdGame, write_real_alfworld_game
from gymnasium.utils.env_checker import check_env
from test_registry import GARBAGE, check_step

import envs.adapters.alfworld as alfworld_adapter
from agents.env_families import expert_player, make_env
from agents.formats.household_agent import StepContext
from agents.projection import ActionProjection
from envs import ADAPTER_TWINS
from envs.adapters import AdapterUnavailable
from envs.webshop import WebShopEnv
from trainer.setup.build import build_config


@contextlib.contextmanager
def refusing_address() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def alfworld(data, **kwargs) -> gym.Env:
    return gym.make("alprl/ALFWorld-v0", data_path=str(data), start_game=HouseholdGame, **kwargs).unwrapped


# ---- without their package, data or server: one line that says what is missing ----

@pytest.mark.skipif(importlib.util.find_spec("textworld") is not None, reason="textworld is installed here")
def test_alfworld_without_its_package_says_how_to_get_it(alfworld_data):
    with pytest.raises(AdapterUnavailable, match=r"needs the alfworld package .*pip install alfworld"):
        gym.make("alprl/ALFWorld-v0", data_path=str(alfworld_data))


def test_alfworld_without_its_game_files_says_where_they_go(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(AdapterUnavailable, match="alfworld-download.*ALFWORLD_DATA"):
        gym.make("alprl/ALFWorld-v0", start_game=HouseholdGame)
    with pytest.raises(AdapterUnavailable, match=r"no .*json_2\.1\.1"):
        gym.make("alprl/ALFWorld-v0", data_path=str(tmp_path), start_game=HouseholdGame)


def test_webshop_without_a_server_names_the_address_to_set(monkeypatch):
    monkeypatch.delenv("WEBSHOP_URL", raising=False)
    with pytest.raises(AdapterUnavailable, match="env.webshop_url"):
        gym.make("alprl/WebShopServer-v0")
    with refusing_address() as url, pytest.raises(AdapterUnavailable, match=f"no WebShop server answers at {url}"):
        gym.make("alprl/WebShopServer-v0", server_url=url)


def test_the_cli_reports_a_missing_adapter_requirement_in_one_line(tiny_model_dir, capsys, monkeypatch):
    from app.cli import main

    monkeypatch.delenv("WEBSHOP_URL", raising=False)
    code = main(["train", "--no-progress", "env.id=alprl/WebShopServer-v0", f"model.path={tiny_model_dir}",
                 "steps=0", "rollout.engine=hf"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "needs a running WebShop server" in err


def test_adapters_have_no_sft_expert_and_say_to_use_the_twin():
    for adapter, twin in ADAPTER_TWINS.items():
        with pytest.raises(ValueError, match=f"twin {twin}"):
            expert_player(adapter)


# ---- ALFWorld against its stand-in data ----

@pytest.mark.skipif(importlib.util.find_spec("alfworld") is None, reason="alfworld is not installed here (`pip "
                    "install alfworld` to run the check against TextWorld)")
def test_alfworld_plays_a_real_textworld_game(tmp_path):
    game_file = write_real_alfworld_game(tmp_path)
    env = gym.make("alprl/ALFWorld-v0", data_path=str(tmp_path), split="test").unwrapped
    obs, info = env.reset(options={"task_id": 0})
    assert obs == ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around "
                   "you, you see a cabinet 1, a countertop 1, and a sidetable 1.\n\nYour task is to: put a apple in "
                   "sidetable.")
    assert info["admissible_commands"] == ["go to cabinet 1", "go to countertop 1", "go to sidetable 1", "help",
                                           "inventory", "look"]
    assert info["gamefile"] == str(game_file) and info["task_type"] == "pick_and_place_simple"
    expected = [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1.", 0.0),
                ("take the apple", "Nothing happens.", 0.0),
                ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.", 0.0),
                ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see nothing.", 0.0),
                ("move apple 1 to sidetable 1", "You move the apple 1 to the sidetable 1.", 1.0)]
    for command, answer, reward in expected:
        step = env.step(command)
        check_step(env, step)
        assert step[:2] == (answer, reward) and step[4]["invalid_action"] == (answer == "Nothing happens.")
    assert step[2] and step[4]["won"]
    env.close()
    check_env(gym.make("alprl/ALFWorld-v0", data_path=str(tmp_path), split="test").unwrapped)

    def play(_: int) -> float:  # the rollout steps its envs from a thread pool; TextWorld's parser is not
        # thread-safe (tatsu), so this failed before the adapter serialized TextWorld calls
        game = gym.make("alprl/ALFWorld-v0", data_path=str(tmp_path), split="test").unwrapped
        game.reset(options={"task_id": 0})
        total = sum(game.step(command)[1] for command, _, _ in expected)
        game.close()
        return total

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(play, range(16))) == [1.0] * 16


def test_alfworld_keeps_the_games_alfworlds_loader_keeps_in_path_order(alfworld_data):
    env = alfworld(alfworld_data)
    for split in ("train", "valid", "test"):
        games = env.games(split)
        assert len(games) == GAMES_PER_SPLIT  # movable, sliced, unsolvable and missing games skipped
        assert [g for g, _ in games] == sorted(g for g, _ in games)
    assert {t for _, t in env.games("test")} == {"pick_and_place_simple", "look_at_obj_in_light",
                                                 "pick_two_obj_and_place"}
    assert all("/valid_unseen/" in g for g, _ in env.games("test"))
    only = alfworld(alfworld_data, task_types=["look_at_obj_in_light"])
    assert {t for _, t in only.games("valid")} == {"look_at_obj_in_light"}
    with pytest.raises(ValueError, match="not ALFWorld task types"):
        alfworld(alfworld_data, task_types=["make_coffee"])


def test_alfworld_episode_follows_the_game_and_pays_once_on_the_win(alfworld_data):
    env = alfworld(alfworld_data, split="test")
    obs, info = env.reset(options={"task_id": 4})
    game = env._game
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-") and "Your task is to:" in obs
    assert info["gamefile"] == env.games("test")[4][0] and info["task_type"] == env.games("test")[4][1]
    assert info["task_id"] == "test-4" and info["admissible_commands"] and not info["won"]
    total, steps = 0.0, 0
    while True:
        step = env.step(game.plan[0])
        check_step(env, step)
        total, steps = total + step[1], steps + 1
        if step[2] or step[3]:
            break
    assert step[2] and step[4]["won"] and total == 1.0 and step[4]["step"] == steps
    assert env.step("look")[1:4] == (0.0, True, False)  # after the end nothing is paid


def test_alfworld_inadmissible_commands_answer_nothing_happens_and_cost_a_step(alfworld_data):
    env = alfworld(alfworld_data, split="valid", max_steps=len(GARBAGE) + 1)
    env.reset(options={"task_id": 0})
    for i, action in enumerate(GARBAGE, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert (obs, reward, terminated, truncated) == ("Nothing happens.", 0.0, False, False)
        assert info["invalid_action"] and info["step"] == i
    *_, truncated, info = env.step("inventory")
    assert truncated and not info["won"] and not info["invalid_action"]


def test_alfworld_task_ids_wrap_on_train_and_are_checked_elsewhere(alfworld_data):
    env = alfworld(alfworld_data)
    _, first = env.reset(options={"split": "train", "task_id": 1})
    _, wrapped = env.reset(options={"split": "train", "task_id": 1 + GAMES_PER_SPLIT})
    assert first["gamefile"] == wrapped["gamefile"]
    with pytest.raises(ValueError, match=f"split test has {GAMES_PER_SPLIT} games"):
        env.reset(options={"split": "test", "task_id": GAMES_PER_SPLIT})
    previous = env._game
    env.reset(options={"split": "test", "task_id": 0})
    assert previous.closed  # each reset closes the game before
    env.close()
    env.close()


def test_adapters_vectorize(adapter_kwargs):
    for env_id, kwargs in adapter_kwargs.items():
        vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", **kwargs)
        obs, info = vec.reset(seed=[1, 2], options={"split": "test", "index": 1})
        assert obs[0] == obs[1] and len(info["admissible_commands"]) == 2
        *_, info = vec.step(["look", "click[back to search]"])
        assert list(info["invalid_action"]) == [env_id != "alprl/ALFWorld-v0", True]
        vec.close()


# ---- WebShop against the stand-in server (real HTTP) ----

def test_webshop_sessions_follow_webshops_goal_indices(webshop_server):
    url, _ = webshop_server
    env = gym.make("alprl/WebShopServer-v0", server_url=url).unwrapped
    twin = WebShopEnv()
    for split, task_id in (("test", 7), ("valid", 3), ("train", 12)):
        obs, info = env.reset(options={"split": split, "task_id": task_id})
        assert obs == twin.reset(options={"split": split, "task_id": task_id})[0]
        assert info["task_id"] == f"{split}-{task_id}" and info["admissible_commands"] == ["search[<your query>]"]
    assert env.session_of("train", 0) == 1500 and env.session_of("train", env.num_goals - 1500) == 1500
    with pytest.raises(ValueError, match="split test has 500 tasks"):
        env.reset(options={"split": "test", "task_id": 500})
    env.close()


def test_webshop_episode_buys_through_the_server_and_skips_invalid_actions(webshop_server):
    url, app = webshop_server
    env = gym.make("alprl/WebShopServer-v0", server_url=url).unwrapped
    env.reset(options={"split": "test", "task_id": 2})
    idx = env._env_idx
    sent = app.state.steps
    obs, reward, terminated, truncated, info = env.step("click[buy now]")  # no such button on the search page
    assert info["invalid_action"] and app.state.steps == sent and (reward, terminated, truncated) == (0.0, False, False)
    total = 0.0
    while True:
        step = env.step(app.state.infos[idx]["expert_plan"][0])
        check_step(env, step)
        total += step[1]
        if step[2] or step[3]:
            break
    assert step[2] and step[4]["won"] and total == 1.0 == step[4]["task_score"]
    env.close()
    assert idx not in app.state.envs  # closed on the server too


def test_make_env_gives_adapters_their_twins_agent_wrappers(alfworld_data, webshop_server, monkeypatch):
    """The trainer builds an adapter like its twin: task indices, action projection, and for ALFWorld the
    household agent's step context (task, hints, unvisited receptacles)."""
    monkeypatch.setattr(alfworld_adapter, "require_alfworld", lambda: None)  # the stand-in plays the games
    monkeypatch.setattr(alfworld_adapter, "start_textworld_game", HouseholdGame)
    cfg = build_config(None, ["env.id=alprl/ALFWorld-v0", f"env.alfworld_data={alfworld_data}", "env.max_steps=9"])
    env = make_env(cfg.env)
    assert isinstance(env, StepContext) and isinstance(env.env, ActionProjection)
    env.reset(options={"split": "test", "index": 1})
    obs, *_, info = env.step("look")
    assert "\nTask: " in obs and info["action_valid"] and info["step"] == 1
    assert env.unwrapped.max_steps == 9
    cfg = build_config(None, ["env.id=alprl/WebShopServer-v0", f"env.webshop_url={webshop_server[0]}"])
    env = make_env(cfg.env)
    assert isinstance(env, ActionProjection)
    _, info = env.reset(options={"split": "test", "index": 3})
    assert info["task_id"] == "test-3"
    env.close()
