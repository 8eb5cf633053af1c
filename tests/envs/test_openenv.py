"""OpenEnv both ways, with the real openenv-core on loopback ports (uvicorn in a thread, tests/envs/adapter_stand_ins.py).

- alprl/OpenEnv-v0 plays a text environment written with openenv-core's own server classes
  (tests/envs/openenv_stand_in.py): its observations, rewards and episode ends are the environment's own.
- alprl's household, shop and TIR envs served as OpenEnv environments (envs/adapters/openenv_server.py) are played
  by openenv-core's own client with the scripted experts' actions to a win, step for step equal to the in-process
  env; `alprl env serve` starts such a server from the command line.
- alprl trains (GRPO steps, tiny model, transformers engine) on an OpenEnv server.

The registry-wide Gymnasium checks run alprl/OpenEnv-v0 against the served household (tests/envs/conftest.py).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("openenv", reason="openenv-core not installed (the openenv extra)")

import torch  # noqa: E402
from adapter_stand_ins import serve  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402
from openenv_stand_in import TRIES, GuessAction, GuessEnvironment, guess_app  # noqa: E402
from test_adapters import refusing_address  # noqa: E402

from envs.adapters import AdapterUnavailable  # noqa: E402
from envs.adapters.openenv_client import finite_reward, pick_action_field  # noqa: E402
from envs.adapters.openenv_server import build_app  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def guess_server():
    with serve(guess_app()) as url:
        yield url


def _served(name: str, **env_kwargs):
    return serve(build_app(name, env_kwargs))


# ---- (a) alprl plays an OpenEnv server ----

def bisect(low: int, high: int, hint: str) -> tuple[int, int]:
    """The range left after a guess of the midpoint and the game's hint."""
    mid = (low + high) // 2
    return (mid + 1, high) if hint.startswith("Higher") else (low, mid - 1) if hint.startswith("Lower") else (mid, mid)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_openenv_env_plays_an_openenv_server_as_the_environment_itself(guess_server, seed):
    env = gym.make("alprl/OpenEnv-v0", base_url=guess_server).unwrapped
    assert (env.action_field, env.observation_field) == ("guess", "prompt")  # found in the server's schema
    own = GuessEnvironment()
    obs, info = env.reset(seed=seed, options={"split": "test", "index": 7})  # options the server does not take
    assert obs == own.reset(seed=seed).prompt and info["step"] == 0 and not info["invalid_action"]
    low, high, steps = 1, 9, 0
    while True:
        guess = str((low + high) // 2)
        obs, reward, terminated, truncated, info = env.step(guess)
        mine = own.step(GuessAction(guess=guess))
        steps += 1
        assert (obs, reward, terminated, truncated) == (mine.prompt, float(mine.reward or 0.0), mine.done, False)
        assert type(reward) is float and info["step"] == steps
        if terminated:
            break
        low, high = bisect(low, high, obs)
    assert obs == "Right!" and reward == 1.0 and info["won"] and info["task_score"] == 1.0  # bisection needs <= 4
    assert env.step("5")[1:4] == (0.0, True, False)  # after the end: answered here, nothing paid
    env.close()
    env.close()


def test_a_lost_game_ends_terminated_and_a_refused_action_costs_a_step(guess_server):
    env = gym.make("alprl/OpenEnv-v0", base_url=guess_server, max_steps=10).unwrapped
    first, _ = env.reset(seed=5)
    obs, reward, terminated, truncated, info = env.step("")  # the schema refuses empty text: invalid, not an error
    assert (obs, reward, terminated, truncated) == (first, 0.0, False, False) and info["invalid_action"]
    for _ in range(TRIES):
        obs, reward, terminated, truncated, info = env.step("x")
    assert obs.startswith("Out of tries") and (reward, terminated, truncated) == (0.0, True, False)
    assert info["step"] == TRIES + 1 and not info["won"]
    env.close()


def test_the_adapters_step_limit_truncates(guess_server):
    env = gym.make("alprl/OpenEnv-v0", base_url=guess_server, max_steps=2).unwrapped
    env.reset(seed=0)
    assert env.step("x")[2:4] == (False, False)
    assert env.step("x")[2:4] == (False, True)
    env.close()


def test_without_a_server_or_with_an_unfillable_action_creation_says_what_to_set(guess_server, monkeypatch):
    monkeypatch.delenv("OPENENV_URL", raising=False)
    with pytest.raises(AdapterUnavailable, match="env.openenv.url"):
        gym.make("alprl/OpenEnv-v0")
    with refusing_address() as url, pytest.raises(AdapterUnavailable, match=f"no OpenEnv server answers at {url}"):
        gym.make("alprl/OpenEnv-v0", base_url=url)
    with pytest.raises(AdapterUnavailable, match="fields guess"):
        gym.make("alprl/OpenEnv-v0", base_url=guess_server, action_field="message")


def test_action_fields_are_read_from_the_schema():
    def schema(props, required):
        return {"properties": {p: {"type": t} for p, t in props.items()} | {"metadata": {"type": "object"}},
                "required": required}

    assert pick_action_field(schema({"code": "string"}, ["code"]), "") == "code"
    assert pick_action_field(schema({"message": "string", "lang": "string"}, []), "") == "message"
    assert pick_action_field(None, "") == "message" and pick_action_field(None, "cmd") == "cmd"
    with pytest.raises(AdapterUnavailable, match="set env.openenv.action_field"):
        pick_action_field(schema({"a": "string", "b": "string"}, []), "")
    with pytest.raises(AdapterUnavailable, match=r"required: move, player"):
        pick_action_field(schema({"move": "string", "player": "integer"}, ["move", "player"]), "")
    assert finite_reward(None, "u") == 0.0 and finite_reward(True, "u") == 1.0
    with pytest.raises(RuntimeError, match="non-finite reward"):
        finite_reward(math.nan, "http://x")


# ---- (b) alprl's envs served to openenv-core's own client ----

def tir_expert(obs: str, info: dict, turn: int) -> str:
    """The scripted solver's code turn, then the number the tool printed as the boxed answer."""
    if turn == 0:
        return info["expert_plan"][0]
    return "The answer is \\boxed{" + re.findall(r"-?\d+", obs)[-1] + "}."


EXPERTS = {"household": lambda obs, info, turn: info["expert_plan"][0],
           "shop": lambda obs, info, turn: info["expert_plan"][0],
           "tir": tir_expert}
SERVED_IDS = {"household": "alprl/Household-v0", "shop": "alprl/WebShop-v0", "tir": "alprl/TIRMath-v0"}


@pytest.mark.parametrize("name", ["household", "shop", "tir"])
def test_openenv_client_plays_a_served_env_to_a_win_as_the_in_process_env(name):
    """openenv-core's GenericEnvClient and the in-process env (with the expert's plan in its info) take the same
    actions: every observation, reward, episode end and info entry is equal, and the episode is won."""
    with _served(name) as url, GenericEnvClient(base_url=url).sync() as client:
        for index in (0, 1):
            reference = gym.make(SERVED_IDS[name], expert=True).unwrapped
            ref_obs, ref_info = reference.reset(seed=index, options={"split": "test", "index": index})
            result = client.reset(seed=index, split="test", index=index)
            assert (result.observation["text"], result.done) == (ref_obs, False)
            turn = 0
            while True:
                action = EXPERTS[name](ref_obs, ref_info, turn)
                ref_obs, ref_reward, terminated, truncated, ref_info = reference.step(action)
                result = client.step({"message": action})
                served = result.observation
                assert (served["text"], result.reward, result.done, served["truncated"]) == \
                    (ref_obs, ref_reward, terminated or truncated, truncated)
                assert served["info"] == json.loads(json.dumps({k: v for k, v in ref_info.items()
                                                                if k != "expert_plan"}))
                turn += 1
                if result.done:
                    break
            assert terminated and result.reward == 1.0 and served["info"]["won"], (name, index, turn)
            assert client.state()["step_count"] == turn
            reference.close()


class TRLHousehold:
    """The served household as TRL's `GRPOTrainer(environment_factory=...)` takes an environment: `reset(**row)`
    returns the text appended to the prompt, each public method is a tool, `get_reward` scores the rollout."""

    url = ""

    def __init__(self) -> None:
        self.client, self.reward = GenericEnvClient(base_url=self.url).sync(), 0.0

    def reset(self, split: str = "train", index: int = 1500, **row) -> str:
        self.reward = 0.0
        return self.client.reset(seed=index, split=split, index=index).observation["text"]

    def act(self, command: str) -> str:
        """Run one household command, such as "go to desk 1".

        Args:
            command: The command, one of the admissible commands.
        """
        result = self.client.step({"message": command})
        self.reward += result.reward or 0.0
        return result.observation["text"]

    def get_reward(self) -> float:
        return self.reward


def test_a_trl_style_environment_class_wins_the_served_household():
    from transformers.utils import get_json_schema

    assert get_json_schema(TRLHousehold.act)["function"]["parameters"]["required"] == ["command"]  # a valid tool
    reference = gym.make("alprl/Household-v0", expert=True).unwrapped
    first, info = reference.reset(seed=3, options={"split": "test", "index": 3})
    with _served("household") as url:
        TRLHousehold.url = url
        env = TRLHousehold()
        assert env.reset(split="test", index=3, prompt="ignored") == first  # the row's other fields are ignored
        for command in info["expert_plan"]:
            env.act(command)
        assert env.get_reward() == 1.0
        env.client.close()


def test_a_served_step_limit_is_truncation_on_both_sides():
    with _served("household", max_steps=2) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            client.reset(seed=0)
            client.step({"message": "look"})
            result = client.step({"message": "look"})
            assert result.done and result.observation["truncated"] and result.reward == 0.0
        env = gym.make("alprl/OpenEnv-v0", base_url=url).unwrapped
        env.reset(seed=0)
        env.step("look")
        assert env.step("look")[2:4] == (False, True)
        env.close()


def test_build_app_refuses_an_unknown_env_or_argument():
    with pytest.raises(ValueError, match="tir, household, shop"):
        build_app("chess")
    with pytest.raises(TypeError, match="colour"):
        build_app("household", {"colour": "red"})


def test_alprl_env_serve_starts_a_server_an_openenv_client_plays():
    with refusing_address() as url:
        port = url.rsplit(":", 1)[1]
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "env", "serve", "household", "--port", port,
                             "--env-arg", "max_steps=4"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert "as an OpenEnv environment at" in proc.stderr.readline()
        deadline = time.monotonic() + 60
        while True:
            try:
                client = GenericEnvClient(base_url=url).sync()
                client.connect()
                break
            except ConnectionError:
                client.close()
                assert time.monotonic() < deadline and proc.poll() is None, "alprl env serve did not start"
                time.sleep(0.2)
        with client:
            assert client.reset(seed=0, split="test", index=2).observation["info"]["task_id"] == "test/2"
            results = [client.step({"message": "look"}) for _ in range(4)]
        assert [r.done for r in results] == [False, False, False, True] and results[-1].observation["truncated"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_alprl_env_serve_refuses_a_bad_name_in_one_line(capsys):
    from app.cli import main

    assert main(["env", "serve", "chess"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot serve 'chess'" in err


# ---- alprl trains on an OpenEnv server ----

@pytest.mark.smoke
def test_grpo_steps_on_an_openenv_server_change_every_parameter(tmp_path, guess_server, tiny_model_dir):
    from agents.models import load_model_and_tokenizer
    from trainer.loop import train
    from trainer.setup.build import build_config

    served_before = GuessEnvironment.steps_served
    cfg = build_config(None, ["env.id=alprl/OpenEnv-v0", f"env.openenv.url={guess_server}", "env.max_steps=2",
                              f"model.path={tiny_model_dir}", f"output_dir={tmp_path}", "rollout.engine=hf",
                              "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
                              "rollout.max_response_tokens=40", "optim.micro_batch_size=4", "eval_tasks=0",
                              "steps=2", "save_every=2", "algo.entropy_coef=0.01"])  # a gradient whatever the rewards
    results = train(cfg, show_progress=False)
    assert len(results) == 2 and GuessEnvironment.steps_served - served_before >= 2 * 4  # every episode stepped
    before = dict(load_model_and_tokenizer(tiny_model_dir)[0].named_parameters())
    after = dict(load_model_and_tokenizer(tmp_path / "checkpoints" / "step_2")[0].named_parameters())
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert math.isfinite(record["rollout/reward"]) and record["rollout/turns"] >= 1
