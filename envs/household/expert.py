"""Household experts: the oracle (privileged, solves every generated task) and an imperfect variant for SFT data.

API
    expert_action(env_or_world, rng=None, epsilon=0.0, privileged=True, search="random") -> str
        The next command for the current state of a HouseholdEnv (or its `World`). Stateless: it re-plans from the
        state each call, so it recovers from any earlier action. `privileged=True` reads where objects are (the
        oracle); `privileged=False` only uses what the agent has seen (`world.observed`) and otherwise explores
        unseen receptacles that could hold the object, in random order (`search="ordered"`: in the fixed (type,
        index) order), opening each closed one. With probability
        `epsilon` it returns a uniformly random admissible command instead. `rng` (random.Random or
        numpy.random.Generator) is required when epsilon > 0 or privileged is False; the env's np_random is never
        touched.
    rollout_oracle(world) -> (plan, won)
        Runs the oracle on `world` in place (pass a copy) up to 50 steps; the generator rejects tasks it fails.

Oracle plans (reference/environments.md §5): find(T, exclude) = go to the first receptacle (sorted) holding an
instance of T not in `exclude`, open it if closed, take it; place(r) = go to r, open if closed, move/put. pick =
find, place(first RT); look = find, go to the lamp's receptacle, use the lamp if off; clean/heat/cool = find, go to
the first sinkbasin/microwave/fridge, process, place; pick-two = find, place(r*), find(excluding those in r*),
place(r*). At most 12 steps. A held object that is not needed is first put back where it fits.
"""

from __future__ import annotations

import random
from typing import Any

from .engine import admissible, base_commands, execute, goal_reached, place_command
from .vocab import CAN_CONTAIN, LAMP_HOLDERS, PROCESS
from .world import World

MAX_STEPS = 50
_VERB = {"sinkbasin": "clean", "microwave": "heat", "fridge": "cool"}


SEARCH_ORDERS = ("random", "ordered")  # expert_action's `search`: unseen receptacles at random or in order

def _randbelow(rng: Any, n: int) -> int:
    if isinstance(rng, random.Random):
        return rng.randrange(n)
    return int(rng.integers(n))  # numpy.random.Generator


def _first_of_type(w: World, rtype: str) -> int:
    return w.r_type.index(rtype)  # ids follow (type, index) order, so the first match is "sorted first"


def _reach(w: World, r: int) -> str | None:
    """The next step towards standing at r with its inside accessible, or None when already there."""
    if w.at != r:
        return "go to " + w.r_name[r]
    if not w.accessible(r):
        return "open " + w.r_name[r]
    return None


def _explore(w: World, hosts: list[int], rng: Any, ordered: bool = False) -> str | None:
    """Non-privileged search: open the unseen receptacle we stand at, else go to an unseen host, a random one or
    (`ordered`) the first in (type, index) order."""
    if w.at >= 0 and not w.observed[w.at] and w.at in hosts:
        return _reach(w, w.at)
    unseen = [r for r in hosts if not w.observed[r]]
    if not unseen:
        return None
    return "go to " + w.r_name[unseen[0 if ordered else _randbelow(rng, len(unseen))]]


def _fetch(w: World, t: str, exclude: set[int], privileged: bool, rng: Any, ordered: bool = False) -> str:
    """Take an instance of type t that is not in `exclude`."""
    for r, objs in enumerate(w.contents):
        if not (privileged or w.observed[r]):
            continue
        for o in objs:
            if w.o_type[o] == t and o not in exclude:
                return _reach(w, r) or f"take {w.o_name[o]} from {w.r_name[r]}"
    hosts = [r for r, rt in enumerate(w.r_type) if t in CAN_CONTAIN[rt]]
    step = _explore(w, hosts, rng, ordered) if not privileged else None
    # Everything seen and nothing found (cannot happen for valid tasks): fall back to the oracle's knowledge.
    return step if step is not None else _fetch(w, t, exclude, True, rng)


def _drop(w: World, o: int) -> str:
    """Put an unneeded held object into the first receptacle that accepts it (open ones first)."""
    hosts = [r for r, rt in enumerate(w.r_type) if w.o_type[o] in CAN_CONTAIN[rt]]
    if w.at in hosts and w.accessible(w.at):
        return place_command(w, o, w.at)
    r = min(hosts, key=lambda r: (not w.accessible(r), r))
    return _reach(w, r) or place_command(w, o, r)


def _look_step(w: World, privileged: bool, rng: Any, ordered: bool = False) -> str:
    g = w.goal
    h = w.holding
    if h < 0:
        return _fetch(w, g.obj, set(), privileged, rng, ordered)
    if w.o_type[h] != g.obj:
        return _drop(w, h)
    lamp = w.o_type.index(g.toggle)
    lr = w.o_in[lamp]
    if not (privileged or w.observed[lr]):
        hosts = [r for r, rt in enumerate(w.r_type) if rt in LAMP_HOLDERS]
        step = _explore(w, hosts, rng, ordered)
        if step is not None:
            return step
    if w.at != lr:
        return "go to " + w.r_name[lr]
    return "use " + w.o_name[lamp]


def policy_step(w: World, privileged: bool = True, rng: Any = None, ordered: bool = False) -> str:
    """The expert's next command for state `w` (no randomness when privileged or `ordered`)."""
    g = w.goal
    if g.task_type == "look_at_obj_in_light":
        return _look_step(w, privileged, rng, ordered)
    target = _first_of_type(w, g.recep)
    exclude: set[int] = set()
    if g.task_type == "pick_two_obj_and_place":
        exclude = {o for o in w.contents[target] if w.o_type[o] == g.obj}
    h = w.holding
    if h < 0:
        return _fetch(w, g.obj, exclude, privileged, rng, ordered)
    if w.o_type[h] != g.obj:
        return _drop(w, h)
    proc = PROCESS[g.task_type]
    if proc is not None:
        app_type = proc[1]
        done = {"sinkbasin": w.clean, "microwave": w.hot, "fridge": w.cool}[app_type][h]
        if not done:
            app = _first_of_type(w, app_type)
            if w.at != app:
                return "go to " + w.r_name[app]
            return f"{_VERB[app_type]} {w.o_name[h]} with {w.r_name[app]}"
    return _reach(w, target) or place_command(w, h, target)


def expert_action(env_or_world: Any, rng: Any = None, epsilon: float = 0.0, privileged: bool = True,
                  search: str = "random") -> str:
    """The expert's next command (see the module docstring); accepts a HouseholdEnv (wrapped or not) or a World."""
    w = env_or_world if isinstance(env_or_world, World) else env_or_world.unwrapped.world
    if w is None:
        raise ValueError("expert_action needs a reset environment (call env.reset() first)")
    if (epsilon > 0 or not privileged) and rng is None:
        raise ValueError("expert_action: pass rng (random.Random or numpy Generator) when epsilon > 0 or "
                         "privileged=False")
    if search not in SEARCH_ORDERS:
        raise ValueError(f"expert_action: search={search!r}; use 'random' or 'ordered'")
    if epsilon > 0 and rng.random() < epsilon:
        cmds = sorted(admissible(w, base_commands(w)))
        return cmds[_randbelow(rng, len(cmds))]
    return policy_step(w, privileged, rng, ordered=search == "ordered")


def rollout_oracle(w: World, max_steps: int = MAX_STEPS) -> tuple[list[str], bool]:
    """Run the oracle on `w` in place; returns (commands taken, whether the goal was reached)."""
    base = base_commands(w)
    plan: list[str] = []
    if goal_reached(w):
        return plan, True
    for _ in range(max_steps):
        cmd = policy_step(w)
        op = admissible(w, base).get(cmd)
        if op is None:  # a policy bug would show here; the generator then rejects the task
            return plan, False
        execute(w, op)
        plan.append(cmd)
        if goal_reached(w):
            return plan, True
    return plan, False
