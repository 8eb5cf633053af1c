"""Household env: ALFWorld strings pinned on a hand-built room, the env contract, splits, vector envs."""

from __future__ import annotations

import pickle
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers alprl/*)
from envs.household import TASK_TYPES, HouseholdEnv
from envs.household.engine import HELP, admissible, base_commands, execute, goal_reached
from envs.household.generator import _initially_true
from envs.household.vocab import CAN_CONTAIN, LAMP_HOLDERS, LAMPS, OPENABLE
from envs.household.world import Goal, World, join_items
from envs.splits import global_index

# id order = (type, index) order
RECEPTACLES = [("cabinet", 1), ("cabinet", 2), ("countertop", 1), ("fridge", 1), ("microwave", 1),
               ("sidetable", 1), ("sinkbasin", 1)]
OBJECTS = [("apple", 0), ("apple", 2), ("desklamp", 5), ("knife", 2), ("mug", 1)]  # (type, receptacle id)


def make_world(grammar: str = "v0.4") -> World:
    goal = Goal("pick_clean_then_place_in_recep", "apple", "countertop", "", "put a clean apple in countertop")
    return World("kitchen", RECEPTACLES, OBJECTS, goal, grammar, loc_ids=[7, 3, 5, 1, 2, 6, 4])


def run(w: World, cmd: str, strip: bool = False) -> str:
    ops = admissible(w, base_commands(w))
    assert cmd in ops, f"{cmd!r} not admissible; have {sorted(ops)}"
    return execute(w, ops[cmd], strip)


def test_list_joining_rule():
    assert join_items([]) == "nothing"
    assert join_items(["apple 1"]) == "a apple 1"
    assert join_items(["apple 1", "mug 2"]) == "a apple 1, and a mug 2"
    assert join_items(["x 1", "y 1", "z 1"]) == "a x 1, a y 1, and a z 1"


def test_worked_example_strings_and_admissible_lists():
    w = make_world()
    # receptacle types ascending, indices descending
    assert w.middle_look == ("You are in the middle of a room. Looking quickly around you, you see a cabinet 2, "
                             "a cabinet 1, a countertop 1, a fridge 1, a microwave 1, a sidetable 1, and a "
                             "sinkbasin 1.")
    assert run(w, "look") == w.middle_look
    assert run(w, "go to cabinet 1") == "You arrive at cabinet 1. The cabinet 1 is closed."
    gotos = [f"go to {t} {i}" for t, i in RECEPTACLES]
    assert sorted(admissible(w, base_commands(w))) == sorted(
        ["examine cabinet 1", *gotos, "help", "inventory", "look", "open cabinet 1"])
    assert run(w, "open cabinet 1") == "You open the cabinet 1. The cabinet 1 is open. In it, you see a apple 1."
    assert run(w, "take apple 1 from cabinet 1") == "You pick up the apple 1 from the cabinet 1."
    assert run(w, "inventory") == "You are carrying: a apple 1."
    assert run(w, "look") == "You are facing the cabinet 1. Next to it, you see nothing."
    assert run(w, "go to countertop 1") == ("You arrive at countertop 1. On the countertop 1, you see a apple 2, "
                                            "and a knife 1.")
    here = admissible(w, base_commands(w))
    assert {"move apple 1 to countertop 1", "examine apple 1", "examine apple 2", "examine knife 1",
            "examine countertop 1"} <= set(here)
    assert not any(c.startswith(("take ", "slice ", "open ", "close ")) for c in here)  # hands full, no knife
    assert run(w, "go to microwave 1") == "You arrive at microwave 1. The microwave 1 is closed."
    assert run(w, "heat apple 1 with microwave 1") == "You heat the apple 1 using the microwave 1."
    assert run(w, "examine apple 1") == "This is a hot apple 1."
    run(w, "go to fridge 1")
    assert run(w, "cool apple 1 with fridge 1") == "You cool the apple 1 using the fridge 1."
    assert run(w, "examine apple 1") == "This is a cold apple 1."
    assert run(w, "go to sinkbasin 1") == "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."
    assert run(w, "clean apple 1 with sinkbasin 1") == "You clean the apple 1 using the sinkbasin 1."
    assert run(w, "examine apple 1") == "This is a cool and clean apple 1."
    run(w, "go to microwave 1")
    run(w, "heat apple 1 with microwave 1")
    assert run(w, "examine apple 1") == "This is a hot and clean apple 1."
    assert not goal_reached(w)
    run(w, "go to countertop 1")
    assert run(w, "move apple 1 to countertop 1") == "You move the apple 1 to the countertop 1."
    assert goal_reached(w)
    assert run(w, "inventory") == "You are not carrying anything."
    assert run(w, "examine countertop 1") == ("On the countertop 1, you see a apple 1, a apple 2, and a knife 1.")


def test_knife_lamp_open_close_and_help():
    w = make_world()
    run(w, "go to countertop 1")
    run(w, "take knife 1 from countertop 1")
    assert run(w, "slice apple 2 with knife 1") == "You sliced the apple 2 with the knife 1."
    assert run(w, "examine apple 2") == "This is a sliced apple 2."
    run(w, "go to fridge 1")
    assert "move knife 1 to fridge 1" not in admissible(w, base_commands(w))  # canContain(fridge) lacks knife
    assert run(w, "open fridge 1") == "You open the fridge 1. The fridge 1 is open. In it, you see nothing."
    assert run(w, "close fridge 1") == "You close the fridge 1."
    assert run(w, "go to sidetable 1") == "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1."
    assert run(w, "examine desklamp 1") == "This desklamp 1 is off."
    assert run(w, "use desklamp 1") == "You turn on the desklamp 1."
    assert run(w, "examine desklamp 1") == "This desklamp 1 is on."
    assert run(w, "use desklamp 1") == "You turn off the desklamp 1."
    assert "take desklamp 1 from sidetable 1" not in admissible(w, base_commands(w))  # lamps are not pickupable
    assert run(w, "help") == HELP
    assert run(w, "go to cabinet 2") == "You arrive at cabinet 2. The cabinet 2 is closed."
    assert "take mug 1 from cabinet 2" not in admissible(w, base_commands(w))  # closed


def test_v03_grammar_put_and_loc_prefix():
    w = make_world("v0.3")
    assert "help" not in admissible(w, base_commands(w))
    assert run(w, "go to countertop 1") == ("You arrive at loc 5. On the countertop 1, you see a apple 2, and a "
                                            "knife 1.")
    run(w, "take apple 2 from countertop 1")
    assert run(w, "go to cabinet 2", strip=True) == "The cabinet 2 is closed."
    run(w, "go to countertop 1")
    assert run(w, "put apple 2 in/on countertop 1") == "You put the apple 2 in/on the countertop 1."


def test_env_intro_invalid_actions_and_reward():
    env = HouseholdEnv(expert=True)
    obs, info = env.reset(options={"task_id": 3, "task_type": "pick_and_place_simple"})
    assert re.fullmatch(r"-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room\. Looking quickly "
                        r"around you, you see .+\.\n\nYour task is to: put (a|some) \w+ (in|on) \w+\.", obs)
    assert info["admissible_commands"] == sorted(set(info["admissible_commands"]))
    before = info["admissible_commands"]
    for bad in ["Look", "go to nowhere 1", "", "take", "\x00\u2011 garbage", "look look"]:
        obs, r, term, trunc, info = env.step(bad)
        assert (obs, r, term, trunc, info["invalid_action"]) == ("Nothing happens.", 0.0, False, False, True)
        assert info["admissible_commands"] == before
    assert info["step"] == 6
    obs, r, _, _, info = env.step("  look \n")  # exact match after strip()
    assert not info["invalid_action"] and obs.startswith("You are in the middle of a room.")
    rewards = [env.step(a)[1] for a in info["expert_plan"]]
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == 1.0
    obs, r, term, trunc, info = env.step("look")  # after the end
    assert (obs, r, term, info["won"], info["task_score"]) == ("Nothing happens.", 0.0, True, True, 1.0)
    for key, typ in [("won", bool), ("task_score", float), ("step", int), ("invalid_action", bool),
                     ("task_id", str), ("task_type", str), ("admissible_commands", list)]:
        assert type(info[key]) is typ, key
    pickle.dumps(info)


def test_truncated_at_50_steps():
    env = HouseholdEnv()
    env.reset(seed=5)
    for i in range(1, 51):
        _, r, term, trunc, info = env.step("inventory")
        assert r == 0.0 and term is False and trunc is (i == 50) and info["step"] == i


def test_seeded_determinism_including_info():
    a, b = HouseholdEnv(expert=True), HouseholdEnv(expert=True)
    ra, rb = a.reset(seed=11), b.reset(seed=11)
    assert ra == rb
    assert a.reset(seed=12)[0] != ra[0]
    a.reset(seed=11)
    for cmd in ["look", ra[1]["admissible_commands"][0], "bogus", ra[1]["expert_plan"][0]]:
        assert a.step(cmd) == b.step(cmd)


def test_splits_disjoint_and_task_ids():
    assert (global_index("test", 0), global_index("test", 499)) == (0, 499)
    assert (global_index("valid", 0), global_index("valid", 999)) == (500, 1499)
    assert global_index("train", 0) == 1500
    with pytest.raises(ValueError, match="outside split 'test'"):
        global_index("test", 500)
    env = HouseholdEnv()
    sigs: dict[str, set] = {}
    for split in ("train", "valid", "test"):
        sigs[split] = set()
        for k in range(150):
            _, info = env.reset(options={"split": split, "task_id": k})
            assert info["task_id"] == f"{split}/{k}"
            sigs[split].add(env.world.signature())
        assert len(sigs[split]) == 150
    assert not (sigs["train"] & sigs["valid"] or sigs["train"] & sigs["test"] or sigs["valid"] & sigs["test"])
    # the same address gives the same task whatever the seed
    env.reset(seed=1, options={"split": "test", "task_id": 7})
    first = env.world.signature()
    env.reset(seed=2, options={"split": "test", "task_id": 7})
    assert env.world.signature() == first


def test_generated_worlds_respect_affordances():
    env = HouseholdEnv()
    seen_types = set()
    for k in range(300):
        env.reset(options={"split": "valid", "task_id": k})
        w = env.world
        seen_types.add(w.goal.task_type)
        assert all(not w.r_open[r] for r in range(len(w.r_type)))
        for o, r in enumerate(w.o_in):
            allowed = w.r_type[r] in LAMP_HOLDERS if w.o_type[o] in LAMPS else w.o_type[o] in CAN_CONTAIN[w.r_type[r]]
            assert allowed, (w.o_name[o], w.r_name[r])
        assert all((t in OPENABLE) == op for t, op in zip(w.r_type, w.r_openable, strict=True))
        assert not goal_reached(w)
        pairs = [(w.o_type[o], w.o_in[o]) for o in range(len(w.o_type))]
        assert not _initially_true(w.goal.task_type, w.goal.obj, w.goal.recep, w.r_type, pairs)
    assert seen_types == set(TASK_TYPES)


def test_bad_options_and_args_raise_clear_errors():
    env = HouseholdEnv()
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"taskid": 1})
    with pytest.raises(ValueError, match="valid task types"):
        env.reset(options={"task_type": "fly"})
    with pytest.raises(ValueError, match="split="):
        HouseholdEnv(split="dev")
    with pytest.raises(ValueError, match="grammar"):
        HouseholdEnv(grammar="v9")


def test_check_env_and_registry():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # render_fps is meaningless for ansi text
        env = gym.make("alprl/Household-v0")
        check_env(env.unwrapped)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs) and env.render() == obs
        for _ in range(20):
            obs, r, _, _, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and type(r) is float
    env.close()
    env.close()


def test_make_vec_sync():
    venv = gym.make_vec("alprl/Household-v0", num_envs=3, vectorization_mode="sync")
    obs, info = venv.reset(seed=[4, 4, 5])
    assert isinstance(obs, tuple) and obs[0] == obs[1] != obs[2]
    actions = tuple(cmds[0] for cmds in info["admissible_commands"])
    obs, rew, term, trunc, info = venv.step(actions)
    assert rew.shape == (3,) and np.all(info["step"] == 1) and not info["invalid_action"].any()
    venv.close()
