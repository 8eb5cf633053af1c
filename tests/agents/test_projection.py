"""Action projection (agents/projection.py) on its own and on the real household and WebShop envs."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/*)
from agents.env_families import make_env
from agents.formats.household_agent import UNVISITED_PREFIX, StepContext
from agents.projection import ActionProjection, project
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig
from trainer.setup.build import build_config

ADMISSIBLE = ["go to cabinet 1", "go to cabinet 2", "open drawer 1", "take apple 1 from countertop 1"]


def test_exact_commands_are_valid_ignoring_case_and_templates_accept_any_text():
    assert project("open drawer 1", ADMISSIBLE) == ("open drawer 1", True)
    assert project("Open Drawer 1", ADMISSIBLE) == ("Open Drawer 1", True)  # the env decides on case
    shop = ["search[<your query>]", "click[b0giske2db]"]
    assert project("search[red lipstick under 30 dollars]", shop) == ("search[red lipstick under 30 dollars]", True)
    assert project("search[]", shop) == ("search[]", False)
    assert project("click[B0GISKE2DB]", shop) == ("click[B0GISKE2DB]", True)


def test_nearest_maps_close_commands_and_leaves_the_rest():
    assert project("go to cabinet 12", ADMISSIBLE, "nearest", 0.9) == ("go to cabinet 1", False)
    assert project("go to cabinet 12", ADMISSIBLE, "exact", 0.9) == ("go to cabinet 12", False)
    assert project("take banana 1 from shelf 3", ADMISSIBLE, "nearest", 0.9) == ("take banana 1 from shelf 3", False)
    assert project("", ADMISSIBLE, "nearest", 0.0) == ("", False)
    shop = ["search[<your query>]", "click[back to search]", "click[b0giske2db]", "click[b01ag32is3]"]
    assert project("click[B0GISKE2DX]", shop, "nearest", 0.8) == ("click[b0giske2db]", False)  # a miscopied id


def test_invalid_commands_cost_the_penalty_at_the_episode_end():
    env = ActionProjection(gym.make("alprl/Household-v0", max_steps=3), penalty=0.1)
    env.reset(options={"split": "test", "task_id": 0})
    obs, reward, term, trunc, info = env.step("fly to the moon")
    assert obs == "Nothing happens." and not info["action_valid"] and info["invalid_actions"] == 1
    assert reward == 0.0 and not (term or trunc)
    look = next(c for c in info["admissible_commands"] if c == "look")
    _, _, _, _, info = env.step(look)
    assert info["action_valid"] and info["invalid_actions"] == 1
    _, reward, term, trunc, info = env.step("???")
    assert trunc and info["invalid_actions"] == 2 and reward == pytest.approx(-0.2) and not info["won"]
    env.reset(options={"split": "test", "task_id": 0})  # the count starts again
    _, _, _, _, info = env.step("look")
    assert info["invalid_actions"] == 0


def test_projected_go_to_reaches_the_receptacle_and_leaves_not_visited():
    cfg = build_config("household_tiny.yaml", ["env.action_projection=nearest"])
    env = make_env(cfg.env)
    assert isinstance(env, StepContext) and isinstance(env.env, ActionProjection)
    _, info = env.reset(options={"split": "test", "index": 0})
    target = next(c for c in info["admissible_commands"] if c.startswith("go to ") and c.endswith(" 1"))
    obs, _, _, _, info = env.step(target + "0")  # "go to sofa 10": no such receptacle
    name = target.removeprefix("go to ")
    assert info["projected_action"] == target and not info["action_valid"]
    assert obs.startswith(f"You arrive at {name}.")
    assert name not in obs.partition(UNVISITED_PREFIX)[2].partition("\n")[0].split(", ")


def test_webshop_clicks_a_listed_product_for_a_miscopied_id():
    cfg = build_config("webshop_tiny.yaml", ["env.action_projection=nearest", "env.projection_min_similarity=0.8",
                                             "env.num_products=300"])
    env = make_env(cfg.env)
    env.reset(options={"split": "test", "index": 0})
    _, _, _, _, info = env.step("search[shirt]")
    product = next(c for c in info["admissible_commands"] if c.startswith("click[b0"))
    miscopied = product[:-2] + ("x" if product[-2] != "x" else "y") + "]"
    obs, _, _, _, info = env.step(miscopied.upper())
    assert info["projected_action"] == product and "Buy Now" in obs


def test_projection_settings_are_checked():
    with pytest.raises(ValueError, match="env.action_projection='closest': valid choices are exact, nearest"):
        ActionProjection(gym.make("alprl/Household-v0"), "closest")
    with pytest.raises(ValueError, match="projection_min_similarity=2"):
        ActionProjection(gym.make("alprl/Household-v0"), "nearest", 2)
    with pytest.raises(ConfigError, match="env.action_projection='nearest' .* need an env with admissible commands"):
        build_config(None, ["env.action_projection=nearest"])  # caught before anything starts
    unchecked = TrainConfig()
    unchecked.env.action_projection = "nearest"
    with pytest.raises(ValueError, match="need an env with admissible commands"):
        make_env(unchecked.env)
