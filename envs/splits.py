"""Every task split and index range of every alprl env, and the one seed-derivation helper of the tree.

A task is addressed by `(split, task_id)`. Splits follow WebShop's index convention on one global index line —
test 0–499, valid 500–1499, train 1500 and up — so they are disjoint by construction. Within train, RL draws
from `RL_TRAIN_INDICES` and SFT expert episodes from `SFT_TRAIN_INDICES`, two disjoint ranges, so a warm start
never saw an RL task. Seeds anywhere in alprl come from `derive_seed`: a hash of named parts, independent of
Python's hash randomization and of the process.
"""

from __future__ import annotations

import hashlib
import operator

SPLIT_OFFSETS: dict[str, int] = {"test": 0, "valid": 500, "train": 1500}
# Number of tasks in each split; train is open-ended (any task_id >= 0 is valid), and `default_size` bounds
# the task_ids drawn from `np_random` when `reset` gets no task_id.
SPLIT_SIZES: dict[str, int | None] = {"test": 500, "valid": 1000, "train": None}
SPLIT_RANGES: dict[str, tuple[int, int | None]] = {
    split: (offset, None if SPLIT_SIZES[split] is None else offset + SPLIT_SIZES[split])
    for split, offset in SPLIT_OFFSETS.items()}
"""Global index range of each split: [start, stop); stop None = unbounded."""
RL_TRAIN_INDICES = range(1_500, 101_500)
"""Global train indices RL samples its tasks from (and MIPU its validation groups)."""
SFT_TRAIN_INDICES = range(500_000, 2**31)
"""Global train indices SFT expert episodes play (example i plays index SFT_TRAIN_INDICES[i]); disjoint from RL."""
assert RL_TRAIN_INDICES.stop <= SFT_TRAIN_INDICES.start and RL_TRAIN_INDICES.start == SPLIT_OFFSETS["train"]


def check_split(split: object) -> str:
    """Return `split` if it names a split, else raise one clear error."""
    if split not in SPLIT_OFFSETS:
        raise ValueError(f"split={split!r} is not a split; use one of {sorted(SPLIT_OFFSETS)}")
    return str(split)


def split_size(split: str, default_train: int) -> int:
    """Number of task ids `reset` draws from when no task_id is given (train uses `default_train`)."""
    size = SPLIT_SIZES[check_split(split)]
    return default_train if size is None else size


def task_id_of_index(split: str, index: object) -> int:
    """The split-relative task id of a global index (the `index` reset option, shared with the TIR env)."""
    try:
        index = operator.index(index)
    except TypeError:
        raise ValueError(f"options['index']={index!r} must be a non-negative integer") from None
    return index - SPLIT_OFFSETS[check_split(split)]


def global_index(split: str, task_id: object) -> int:
    """Map `(split, task_id)` onto the global index line; raises ValueError for an id outside the split."""
    check_split(split)
    try:
        task_id = operator.index(task_id)  # accepts numpy integers, refuses floats and strings
    except TypeError:
        raise ValueError(f"options['task_id']={task_id!r} must be a non-negative integer") from None
    size = SPLIT_SIZES[split]
    if task_id < 0 or (size is not None and task_id >= size):
        upper = "inf" if size is None else str(size - 1)
        raise ValueError(f"options['task_id']={task_id} is outside split {split!r} (valid ids: 0..{upper})")
    return SPLIT_OFFSETS[split] + task_id


def sft_index(example: int) -> int:
    """The global train index SFT example `example` plays."""
    return SFT_TRAIN_INDICES[example]


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from the `repr` of the parts (stable across processes and Python runs), e.g.
    `derive_seed("rollout", seed, step)`; the first part names what the seed is for."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
