"""ALFWorld vocabulary and affordances, and the room templates of the procedural generator.

Facts condensed from askforalfred/alfred `gen/constants.py` (same tables in alfworld) as summarized in
reference/environments.md §2.1 and §2.4. Every name is a lower-case type without index ("apple"); instances get
"apple 1", "apple 2", ... in the world.
"""

from __future__ import annotations

from dataclasses import dataclass

FOOD = frozenset({"apple", "bread", "egg", "lettuce", "potato", "tomato"})
WARE = frozenset({"bowl", "cup", "mug", "plate", "pan", "pot", "kettle"})
UTENSIL = frozenset({"butterknife", "fork", "knife", "ladle", "spatula", "spoon"})
SMALL = frozenset({
    "alarmclock", "book", "candle", "cd", "cellphone", "cloth", "creditcard", "keychain", "newspaper", "pen",
    "pencil", "remotecontrol", "watch", "tissuebox", "vase", "statue",
})
BATH = frozenset({
    "soapbar", "soapbottle", "spraybottle", "toiletpaper", "dishsponge", "handtowel", "papertowel", "plunger",
})
BIG = frozenset({"laptop", "pillow", "basketball", "baseballbat", "tennisracket"})
SHAKERS = frozenset({"peppershaker", "saltshaker"})
OTHER = frozenset({"winebottle", "wateringcan", "towel"})
LAMPS = frozenset({"desklamp", "floorlamp"})

# Every pickupable object type (lamps are objects too, but never pickupable).
PICKUPABLE = FOOD | WARE | UTENSIL | SMALL | BATH | BIG | SHAKERS | OTHER

OPENABLE = frozenset({"fridge", "cabinet", "microwave", "drawer", "safe"})
TOGGLEABLE = LAMPS
SLICEABLE = frozenset({"apple", "bread", "egg", "lettuce", "potato", "tomato"})
HEATABLE = frozenset({"apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"})
COOLABLE = HEATABLE | {"bowl", "lettuce", "pan", "pot", "winebottle"}
CLEANABLE = frozenset({
    "apple", "bowl", "butterknife", "cloth", "cup", "dishsponge", "egg", "fork", "kettle", "knife", "ladle",
    "lettuce", "mug", "pan", "plate", "pot", "potato", "soapbar", "spatula", "spoon", "tomato",
})
SHARP = frozenset({"knife", "butterknife"})
# Receptacles that may hold a lamp (lamps are placed by the generator, not through canContain).
LAMP_HOLDERS = frozenset({"desk", "sidetable", "dresser", "shelf"})

_TABLE = FOOD | WARE | UTENSIL | SMALL | BATH | SHAKERS | {
    "laptop", "baseballbat", "basketball", "tennisracket", "winebottle", "wateringcan",
}
_DESK = SMALL | {
    "laptop", "bowl", "cup", "mug", "plate", "basketball", "tennisracket", "spraybottle", "toiletpaper",
    "wateringcan", "winebottle",
}
_SEAT = frozenset({
    "basketball", "book", "cellphone", "cloth", "creditcard", "keychain", "laptop", "newspaper", "pillow",
    "remotecontrol",
})

# receptacle type -> object types it may contain (reference/environments.md §2.4)
CAN_CONTAIN: dict[str, frozenset[str]] = {
    "countertop": _TABLE,
    "diningtable": _TABLE,
    "coffeetable": _TABLE,
    "sidetable": _TABLE,
    "cabinet": WARE | SHAKERS | {
        "book", "candle", "cd", "cloth", "dishsponge", "ladle", "newspaper", "soapbar", "soapbottle",
        "spraybottle", "tissuebox", "toiletpaper", "vase", "wateringcan", "winebottle", "handtowel", "plunger",
    },
    "drawer": (UTENSIL - {"kettle"}) | (SMALL - {"alarmclock", "vase", "statue"}) | SHAKERS | {
        "dishsponge", "soapbar", "soapbottle", "spraybottle", "toiletpaper", "wateringcan", "handtowel",
    },
    "shelf": SMALL | SHAKERS | {
        "bowl", "cup", "mug", "plate", "pot", "kettle", "soapbar", "soapbottle", "spraybottle", "toiletpaper",
        "wateringcan", "winebottle", "handtowel",
    },
    "desk": _DESK,
    "dresser": _DESK,
    "fridge": FOOD | {"bowl", "cup", "mug", "plate", "pan", "pot", "winebottle"},
    "microwave": frozenset({"apple", "bread", "egg", "potato", "tomato", "bowl", "cup", "mug", "plate"}),
    "sinkbasin": (FOOD - {"bread"}) | WARE | UTENSIL | {"cloth", "dishsponge", "soapbar", "handtowel"},
    "bathtubbasin": frozenset({"cloth", "dishsponge", "soapbar", "handtowel"}),
    "stoveburner": frozenset({"kettle", "pan", "pot"}),
    "coffeemachine": frozenset({"mug"}),
    "garbagecan": FOOD | {
        "cd", "cloth", "dishsponge", "newspaper", "papertowel", "pen", "pencil", "soapbar", "soapbottle",
        "spraybottle", "tissuebox", "toiletpaper", "winebottle", "handtowel",
    },
    "sofa": _SEAT,
    "armchair": _SEAT,
    "ottoman": _SEAT,
    "bed": frozenset({
        "baseballbat", "basketball", "book", "cellphone", "laptop", "newspaper", "pillow", "tennisracket",
    }),
    "toilet": frozenset({
        "candle", "cloth", "dishsponge", "newspaper", "papertowel", "soapbar", "soapbottle", "spraybottle",
        "tissuebox", "toiletpaper", "handtowel",
    }),
    "toiletpaperhanger": frozenset({"toiletpaper"}),
    "towelholder": frozenset({"towel"}),
    "handtowelholder": frozenset({"handtowel"}),
    "laundryhamper": frozenset({"cloth"}),
    "safe": frozenset({"cd", "cellphone", "creditcard", "keychain", "statue", "vase", "watch"}),
    "cart": BATH | {"candle", "cloth", "mug", "statue", "tissuebox", "vase"},
    # The kitchen template has a toaster; ALFWorld's table lets nothing be put in it.
    "toaster": frozenset(),
}


@dataclass(frozen=True)
class RoomTemplate:
    """How one room kind is generated.

    receptacles: receptacle type -> (min count, max count), inclusive.
    objects: the object types that may appear in this room kind.
    n_types: (min, max) number of distinct object types drawn for one world.
    lamp: whether one lamp (desklamp or floorlamp) is placed in a lamp holder.
    """

    receptacles: dict[str, tuple[int, int]]
    objects: tuple[str, ...]
    n_types: tuple[int, int]
    lamp: bool


ROOMS: dict[str, RoomTemplate] = {
    "kitchen": RoomTemplate(
        receptacles={
            "cabinet": (3, 13), "countertop": (1, 3), "drawer": (1, 9), "stoveburner": (2, 4), "fridge": (1, 1),
            "microwave": (1, 1), "sinkbasin": (1, 1), "coffeemachine": (1, 1), "toaster": (1, 1),
            "garbagecan": (1, 1), "diningtable": (0, 1), "shelf": (0, 3),
        },
        objects=tuple(sorted(FOOD | WARE | UTENSIL | SHAKERS | {
            "winebottle", "dishsponge", "soapbottle", "spraybottle", "papertowel", "creditcard", "cellphone",
            "vase", "statue",
        })),
        n_types=(12, 22),
        lamp=False,
    ),
    "livingroom": RoomTemplate(
        receptacles={
            "sofa": (1, 1), "armchair": (0, 2), "coffeetable": (1, 1), "sidetable": (1, 3), "drawer": (1, 6),
            "cabinet": (0, 4), "shelf": (1, 6), "garbagecan": (1, 1), "ottoman": (0, 1), "diningtable": (0, 1),
            "dresser": (0, 1), "safe": (0, 1),
        },
        objects=tuple(sorted(SMALL | {
            "laptop", "pillow", "basketball", "bowl", "plate", "wateringcan", "winebottle", "papertowel",
        })),
        n_types=(10, 18),
        lamp=True,
    ),
    "bedroom": RoomTemplate(
        receptacles={
            "bed": (1, 1), "desk": (0, 1), "sidetable": (1, 2), "dresser": (0, 1), "drawer": (2, 8),
            "shelf": (1, 6), "garbagecan": (1, 1), "laundryhamper": (0, 1), "safe": (0, 1), "armchair": (0, 1),
        },
        objects=tuple(sorted(SMALL | {
            "laptop", "pillow", "basketball", "baseballbat", "tennisracket", "mug", "bowl", "cup", "plate",
        })),
        n_types=(10, 18),
        lamp=True,
    ),
    "bathroom": RoomTemplate(
        receptacles={
            "toilet": (1, 1), "sinkbasin": (1, 2), "bathtubbasin": (0, 1), "towelholder": (1, 2),
            "handtowelholder": (0, 1), "toiletpaperhanger": (1, 1), "cabinet": (1, 4), "countertop": (1, 1),
            "garbagecan": (1, 1), "shelf": (0, 2), "drawer": (0, 4), "cart": (0, 1),
        },
        objects=tuple(sorted(BATH | {"towel", "cloth", "candle", "tissuebox"})),
        n_types=(8, 12),
        lamp=False,
    ),
}

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# alfworld `gen/goal_library.py` templates; {obj}/{recep}/{toggle} are type names without index.
GOAL_TEMPLATES: dict[str, tuple[str, str]] = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

# task type -> (required object affordance set, appliance receptacle type); None = no processing step.
PROCESS: dict[str, tuple[frozenset[str], str] | None] = {
    "pick_and_place_simple": None,
    "look_at_obj_in_light": None,
    "pick_clean_then_place_in_recep": (CLEANABLE, "sinkbasin"),
    "pick_heat_then_place_in_recep": (HEATABLE, "microwave"),
    "pick_cool_then_place_in_recep": (COOLABLE, "fridge"),
    "pick_two_obj_and_place": None,
}

# Room kinds able to host each task type (the appliance or a lamp must exist there).
ROOMS_FOR_TASK: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("livingroom", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_two_obj_and_place": ("kitchen", "livingroom", "bedroom", "bathroom"),
}
