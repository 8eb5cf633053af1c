"""Seeded world and task generator (reference/environments.md §2.1, §2.2, §5).

`generate(rng, task_type, grammar)` draws a room kind able to host the task type, its receptacles (counts from the
room template), object types and instances placed only where `canContain` allows, one lamp in living rooms and
bedrooms, then a valid goal: the object type is pickupable and has the needed affordance, the receptacle type can
contain it, the appliance exists, pick-two has >= 2 instances, and the goal is false at the start. The oracle
(expert.rollout_oracle) is run on every candidate task; a task it fails is resampled (bounded retries).
"""

from __future__ import annotations

import random

from .expert import rollout_oracle
from .vocab import (
    CAN_CONTAIN,
    GOAL_TEMPLATES,
    LAMP_HOLDERS,
    LAMPS,
    PICKUPABLE,
    PROCESS,
    ROOMS,
    ROOMS_FOR_TASK,
    TASK_TYPES,
)
from .world import Goal, World

MAX_TRIES = 64
# Instances per object type: mostly one or two, sometimes three (distractors of the goal type).
_INSTANCE_COUNTS = (1, 1, 2, 2, 3)


def _layout(rng: random.Random, room: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Receptacles as (type, index) in id order and objects as (type, receptacle id) in id order."""
    tpl = ROOMS[room]
    receptacles: list[tuple[str, int]] = []
    for rtype in sorted(tpl.receptacles):
        lo, hi = tpl.receptacles[rtype]
        receptacles += [(rtype, i) for i in range(1, rng.randint(lo, hi) + 1)]
    hosts_of: dict[str, list[int]] = {}
    for t in tpl.objects:
        hosts = [r for r, (rt, _) in enumerate(receptacles) if t in CAN_CONTAIN[rt]]
        if hosts:
            hosts_of[t] = hosts
    types = sorted(hosts_of)
    n_types = min(rng.randint(*tpl.n_types), len(types))
    objects: list[tuple[str, int]] = []
    for t in sorted(rng.sample(types, n_types)):
        for _ in range(rng.choice(_INSTANCE_COUNTS)):
            objects.append((t, rng.choice(hosts_of[t])))
    if tpl.lamp:
        holders = [r for r, (rt, _) in enumerate(receptacles) if rt in LAMP_HOLDERS]
        objects.append((rng.choice(sorted(LAMPS)), rng.choice(holders)))
        objects.sort(key=lambda x: x[0])  # stable: keeps instance order within a type
    return receptacles, objects


def _candidates(task_type: str, receptacles: list[tuple[str, int]],
                objects: list[tuple[str, int]]) -> list[tuple[str, str, str]]:
    """Valid (object type, receptacle type, lamp type) triples for `task_type` in this layout."""
    r_types = [rt for rt, _ in receptacles]
    present = sorted({t for t, _ in objects if t in PICKUPABLE})
    proc = PROCESS[task_type]
    if proc is not None and proc[1] not in r_types:
        return []
    if task_type == "look_at_obj_in_light":
        lamps = sorted({t for t, _ in objects if t in LAMPS})
        return [(t, "", lamp) for t in present for lamp in lamps]
    counts = {t: sum(ot == t for ot, _ in objects) for t in present}
    out = []
    for t in present:
        if proc is not None and t not in proc[0]:
            continue
        if task_type == "pick_two_obj_and_place" and counts[t] < 2:
            continue
        for rt in sorted(set(r_types)):
            if t not in CAN_CONTAIN[rt] or (proc is not None and rt == proc[1]):
                continue
            if _initially_true(task_type, t, rt, r_types, objects):
                continue
            out.append((t, rt, ""))
    return out


def _initially_true(task_type: str, t: str, rt: str, r_types: list[str], objects: list[tuple[str, int]]) -> bool:
    """Whether the goal already holds at the start (processed-state goals never do: nothing starts hot/cool/clean)."""
    inside = [r for ot, r in objects if ot == t and r_types[r] == rt]
    if task_type == "pick_and_place_simple":
        return bool(inside)
    if task_type == "pick_two_obj_and_place":
        return len(inside) != len(set(inside))
    return False


def generate(rng: random.Random, task_type: str | None = None, grammar: str = "v0.4") -> World:
    """A world whose task the oracle solves within 50 steps; task_type None draws one uniformly."""
    if task_type is None:
        task_type = rng.choice(TASK_TYPES)
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type={task_type!r} is not a household task type; use one of {list(TASK_TYPES)}")
    for _ in range(MAX_TRIES):
        room = rng.choice(ROOMS_FOR_TASK[task_type])
        receptacles, objects = _layout(rng, room)
        cands = _candidates(task_type, receptacles, objects)
        if not cands:
            continue
        obj, recep, toggle = rng.choice(cands)
        text = rng.choice(GOAL_TEMPLATES[task_type]).format(obj=obj, recep=recep, toggle=toggle)
        loc_ids = list(range(1, len(receptacles) + 1))
        rng.shuffle(loc_ids)
        world = World(room, receptacles, objects, Goal(task_type, obj, recep, toggle, text), grammar, loc_ids)
        if rollout_oracle(world.copy())[1]:
            return world
    raise RuntimeError(f"household generator found no solvable {task_type} task in {MAX_TRIES} tries")
