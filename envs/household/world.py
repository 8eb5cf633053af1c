"""The household world state: one room of receptacles and objects, a goal, and the agent.

Receptacles and objects are integer ids. Ids follow (type, index) ascending order, so "sorted first" is the lowest
id and a receptacle's `contents` list, kept sorted, lists objects in (type, index) order. Static fields (names,
types, the goal) are shared between copies; `copy()` duplicates only the mutable state, which keeps the oracle's
look-ahead rollouts cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from .vocab import OPENABLE


@dataclass(frozen=True, slots=True)
class Goal:
    """A task: `task_type` (one of vocab.TASK_TYPES), object type `obj`, receptacle type `recep` ("" for look
    tasks), lamp type `toggle` ("" unless look) and the goal sentence `text` (no trailing period)."""

    task_type: str
    obj: str
    recep: str
    toggle: str
    text: str


def join_items(names: list[str]) -> str:
    """ALFWorld's list rule: "a x", "a x, and a y", "a x, a y, and a z"; no items -> "nothing".

    The article is always "a" (ALFWorld prints "a apple 1")."""
    if not names:
        return "nothing"
    items = ["a " + n for n in names]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


class World:
    """Mutable state of one episode.

    Static: room, r_name/r_type/r_openable/r_loc (per receptacle; r_loc is the v0.3 "loc N" id), o_name/o_type
    (per object), goal, grammar ("v0.4" | "v0.3"), middle_look (the `look` text in the middle of the room).
    Mutable: at (receptacle id, -1 = middle of the room), holding (object id, -1 = nothing), r_open, contents
    (object ids per receptacle, sorted), o_in (receptacle id per object, -1 = in hand), hot/cool/clean/sliced/on
    flags per object, observed (receptacles whose contents the agent has seen; they change only by its actions).
    """

    __slots__ = (
        "room", "r_name", "r_type", "r_openable", "r_loc", "o_name", "o_type", "goal", "grammar", "middle_look",
        "at", "holding", "r_open", "contents", "o_in", "hot", "cool", "clean", "sliced", "on", "observed",
    )

    def __init__(self, room: str, receptacles: list[tuple[str, int]], objects: list[tuple[str, int]],
                 goal: Goal, grammar: str, loc_ids: list[int]) -> None:
        """receptacles: (type, index) in id order; objects: (type, receptacle id) in id order."""
        self.room = room
        self.r_type = [t for t, _ in receptacles]
        self.r_name = [f"{t} {i}" for t, i in receptacles]
        self.r_openable = [t in OPENABLE for t in self.r_type]
        self.r_loc = loc_ids
        self.o_type = [t for t, _ in objects]
        seen: dict[str, int] = {}
        self.o_name = []
        for t in self.o_type:
            seen[t] = seen.get(t, 0) + 1
            self.o_name.append(f"{t} {seen[t]}")
        self.goal = goal
        self.grammar = grammar
        # `look` from the middle: receptacle types ascending, indices descending (published ALFWorld transcripts).
        order = sorted(range(len(receptacles)), key=lambda r: (receptacles[r][0], -receptacles[r][1]))
        self.middle_look = ("You are in the middle of a room. Looking quickly around you, you see "
                            + join_items([self.r_name[r] for r in order]) + ".")
        self.at = -1
        self.holding = -1
        self.r_open = [False] * len(receptacles)
        self.contents: list[list[int]] = [[] for _ in receptacles]
        self.o_in = [r for _, r in objects]
        for o, r in enumerate(self.o_in):
            self.contents[r].append(o)  # ids ascend, so each list is already sorted
        n = len(objects)
        self.hot, self.cool, self.clean = [False] * n, [False] * n, [False] * n
        self.sliced, self.on = [False] * n, [False] * n
        self.observed = [False] * len(receptacles)

    def copy(self) -> World:
        """A copy sharing the static fields and owning its mutable state."""
        w = World.__new__(World)
        for name in ("room", "r_name", "r_type", "r_openable", "r_loc", "o_name", "o_type", "goal", "grammar",
                     "middle_look", "at", "holding"):
            setattr(w, name, getattr(self, name))
        w.r_open = self.r_open.copy()
        w.contents = [c.copy() for c in self.contents]
        w.o_in = self.o_in.copy()
        w.hot, w.cool, w.clean = self.hot.copy(), self.cool.copy(), self.clean.copy()
        w.sliced, w.on, w.observed = self.sliced.copy(), self.on.copy(), self.observed.copy()
        return w

    def accessible(self, r: int) -> bool:
        """True when receptacle r's inside can be seen and reached (open, or not openable)."""
        return self.r_open[r] or not self.r_openable[r]

    def signature(self) -> tuple:
        """A hashable summary of the task (room layout, object placement, goal) for split-disjointness checks."""
        return (self.room, tuple(self.r_name), tuple(self.o_name), tuple(self.o_in), self.goal.text)
