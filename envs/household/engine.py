"""Household rules: admissible commands, their effects and ALFWorld's feedback strings, and the goal predicates.

Preconditions and effects follow alfworld `alfworld/data/alfred.pddl` / `alfred.twl2` as condensed in
reference/environments.md §2.3. `admissible(world)` maps every admissible command string to an operation tuple
`(op, a, b)` (a, b: receptacle or object ids), so executing a command is a dict lookup, never a parse. Departures:
examining a sliced object inserts "sliced" before the name ("This is a hot sliced apple 1."); slicing only sets a
flag (no task needs slices, ALFWorld skips sliced tasks).
"""

from __future__ import annotations

from .vocab import CAN_CONTAIN, CLEANABLE, COOLABLE, HEATABLE, PICKUPABLE, SHARP, SLICEABLE, TOGGLEABLE
from .world import World, join_items

NOTHING = "Nothing happens."

HELP = "\n".join([
    "Available commands:",
    "  look:                             look around your current location",
    "  inventory:                        check your current inventory",
    "  go to (receptacle):               move to a receptacle",
    "  open (receptacle):                open a receptacle",
    "  close (receptacle):               close a receptacle",
    "  take (object) from (receptacle):  take an object from a receptacle",
    "  move (object) to (receptacle):    place an object in or on a receptacle",
    "  examine (something):              examine a receptacle or an object",
    "  use (object):                     use an object",
    "  heat (object) with (receptacle):  heat an object using a receptacle",
    "  clean (object) with (receptacle): clean an object using a receptacle",
    "  cool (object) with (receptacle):  cool an object using a receptacle",
    "  slice (object) with (object):     slice an object using a sharp object",
])

# appliance receptacle type -> (verb, object affordance)
_APPLIANCES = {"microwave": ("heat", HEATABLE), "fridge": ("cool", COOLABLE), "sinkbasin": ("clean", CLEANABLE)}
Op = tuple[str, int, int]


def view(w: World, r: int) -> str:
    """What the agent sees of receptacle r."""
    name = w.r_name[r]
    if not w.r_openable[r]:
        return f"On the {name}, you see {join_items([w.o_name[o] for o in w.contents[r]])}."
    if w.r_open[r]:
        return f"The {name} is open. In it, you see {join_items([w.o_name[o] for o in w.contents[r]])}."
    return f"The {name} is closed."


def place_command(w: World, o: int, r: int) -> str:
    """The grammar's command for putting held object o into receptacle r."""
    if w.grammar == "v0.3":
        return f"put {w.o_name[o]} in/on {w.r_name[r]}"
    return f"move {w.o_name[o]} to {w.r_name[r]}"


def examine_object(w: World, o: int) -> str:
    """`examine {o}` feedback: temperature/cleanliness/slice state, lamp state, or nothing special."""
    name = w.o_name[o]
    if w.o_type[o] in TOGGLEABLE:
        return f"This {name} is {'on' if w.on[o] else 'off'}."
    temp = "hot" if w.hot[o] else ("cool" if w.cool[o] else "")
    sliced = "sliced " if w.sliced[o] else ""
    if temp and w.clean[o]:
        return f"This is a {temp} and clean {sliced}{name}."
    if temp:
        # ALFWorld says "cold" for a cool object that is not clean, "cool" when combined with "clean".
        return f"This is a {'cold' if temp == 'cool' else 'hot'} {sliced}{name}."
    if w.clean[o]:
        return f"This is a clean {sliced}{name}."
    if sliced:
        return f"This is a sliced {name}."
    return f"There's nothing special about {name}."


def base_commands(w: World) -> dict[str, Op]:
    """Commands admissible everywhere (look, inventory, help, every `go to`); built once per world."""
    cmds: dict[str, Op] = {"look": ("look", -1, -1), "inventory": ("inventory", -1, -1)}
    if w.grammar == "v0.4":
        cmds["help"] = ("help", -1, -1)
    for r, name in enumerate(w.r_name):
        cmds["go to " + name] = ("go", r, -1)
    return cmds


def admissible(w: World, base: dict[str, Op]) -> dict[str, Op]:
    """Every admissible command in the current state -> its operation (`base` from base_commands(w))."""
    cmds = dict(base)
    h = w.holding
    if h >= 0:
        cmds["examine " + w.o_name[h]] = ("examine_o", h, -1)
    r = w.at
    if r < 0:
        return cmds
    rname, rtype = w.r_name[r], w.r_type[r]
    cmds["examine " + rname] = ("examine_r", r, -1)
    if w.r_openable[r]:
        if w.r_open[r]:
            cmds["close " + rname] = ("close", r, -1)
        else:
            cmds["open " + rname] = ("open", r, -1)
    knife = h if h >= 0 and w.o_type[h] in SHARP else -1
    if w.accessible(r):
        for o in w.contents[r]:
            oname, otype = w.o_name[o], w.o_type[o]
            cmds["examine " + oname] = ("examine_o", o, -1)
            if otype in TOGGLEABLE:
                cmds["use " + oname] = ("use", o, -1)
            elif h < 0 and otype in PICKUPABLE:
                cmds[f"take {oname} from {rname}"] = ("take", o, r)
            if knife >= 0 and otype in SLICEABLE:
                cmds[f"slice {oname} with {w.o_name[knife]}"] = ("slice", o, knife)
        if h >= 0 and w.o_type[h] in CAN_CONTAIN[rtype]:
            cmds[place_command(w, h, r)] = ("place", h, r)
    if h >= 0 and rtype in _APPLIANCES:
        verb, able = _APPLIANCES[rtype]
        if w.o_type[h] in able:
            cmds[f"{verb} {w.o_name[h]} with {rname}"] = (verb, h, r)
    return cmds


def _arrive(w: World, r: int, strip_loc_prefix: bool) -> str:
    w.at = r
    if w.accessible(r):
        w.observed[r] = True
    if w.grammar == "v0.3":
        prefix = "" if strip_loc_prefix else f"You arrive at loc {w.r_loc[r]}. "
    else:
        prefix = f"You arrive at {w.r_name[r]}. "
    return prefix + view(w, r)


def _place(w: World, o: int, r: int) -> str:
    w.holding = -1
    w.o_in[o] = r
    w.contents[r].append(o)
    w.contents[r].sort()
    if w.grammar == "v0.3":
        return f"You put the {w.o_name[o]} in/on the {w.r_name[r]}."
    return f"You move the {w.o_name[o]} to the {w.r_name[r]}."


def execute(w: World, op: Op, strip_loc_prefix: bool = False) -> str:
    """Apply an admissible operation to `w` in place and return the feedback text."""
    kind, a, b = op
    if kind == "go":
        return _arrive(w, a, strip_loc_prefix)
    if kind == "take":
        w.contents[b].remove(a)
        w.o_in[a] = -1
        w.holding = a
        return f"You pick up the {w.o_name[a]} from the {w.r_name[b]}."
    if kind == "place":
        return _place(w, a, b)
    if kind == "open":
        w.r_open[a] = True
        w.observed[a] = True
        return f"You open the {w.r_name[a]}. " + view(w, a)
    if kind == "close":
        w.r_open[a] = False
        return f"You close the {w.r_name[a]}."
    if kind in ("heat", "cool"):
        w.hot[a], w.cool[a] = kind == "heat", kind == "cool"
        return f"You {kind} the {w.o_name[a]} using the {w.r_name[b]}."
    if kind == "clean":
        w.clean[a] = True
        return f"You clean the {w.o_name[a]} using the {w.r_name[b]}."
    if kind == "use":
        w.on[a] = not w.on[a]
        return f"You turn {'on' if w.on[a] else 'off'} the {w.o_name[a]}."
    if kind == "slice":
        w.sliced[a] = True
        return f"You sliced the {w.o_name[a]} with the {w.o_name[b]}."
    if kind == "examine_o":
        return examine_object(w, a)
    if kind == "examine_r":
        return view(w, a)
    if kind == "look":
        if w.at < 0:
            return w.middle_look
        return f"You are facing the {w.r_name[w.at]}. Next to it, you see nothing."
    if kind == "inventory":
        return f"You are carrying: a {w.o_name[w.holding]}." if w.holding >= 0 else "You are not carrying anything."
    if kind == "help":
        return HELP
    raise ValueError(f"unknown household operation {kind!r}")  # unreachable: ops come from admissible()


def goal_reached(w: World) -> bool:
    """The goal predicate of w.goal (type-level: any instance of the goal types counts)."""
    g = w.goal
    tt = g.task_type
    if tt == "look_at_obj_in_light":
        h = w.holding
        if h < 0 or w.o_type[h] != g.obj or w.at < 0:
            return False
        return any(w.o_type[o] == g.toggle and w.on[o] for o in w.contents[w.at])
    if tt == "pick_two_obj_and_place":
        return any(
            w.r_type[r] == g.recep and sum(w.o_type[o] == g.obj for o in w.contents[r]) >= 2
            for r in range(len(w.r_type))
        )
    flag = {"pick_clean_then_place_in_recep": w.clean, "pick_heat_then_place_in_recep": w.hot,
            "pick_cool_then_place_in_recep": w.cool}.get(tt)
    for o, r in enumerate(w.o_in):
        if r >= 0 and w.o_type[o] == g.obj and w.r_type[r] == g.recep and (flag is None or flag[o]):
            return True
    return False
