"""reasoning-gym's procedural tasks as a problem source: `reasoning_gym:<name>[,<name>...]` where a dataset file's
path would go (`env.dataset`, `env.eval_dataset`; the math envs' `dataset` / `eval_dataset` arguments).

Each name is a dataset registered in the `reasoning_gym` package, built with its own API
(`reasoning_gym.create_dataset(name, seed=..., size=..., **config)`) and graded by its own
`score_answer(answer, entry)`. The envs extract the reply's final answer as they do for every math problem (the last
complete `\\boxed{...}`, `envs.boxed`) and hand that string, untouched, to the scorer (None when there is no box).

Reward and success. `RGProblem.score` is the scorer's value: a float in [0, 1] where reasoning-gym gives partial
credit (a knights-and-knaves answer with some roles right, a word list partly in order, a valid but trivial logical
conclusion). The reward is that value as it is; success (`won`, and so avg@k and pass@k) needs full credit,
`FULL_CREDIT`. Two departures from calling the scorer bare, both so that a policy's text cannot break a rollout: a
scorer that raises, or returns NaN or a non-number, scores 0.0 and a value outside [0, 1] is clipped into it; and
an answer longer than `MAX_ANSWER_CHARS` scores 0.0 without the scorer (some scorers parse with sympy, and unlike
math-verify's grading they run in the calling thread without a time limit).

Splits, disjoint by seed and by content. Item i of a reasoning-gym dataset seeded s comes from `Random(s + i)`,
so datasets seeded s and s + 1 share all but one item: split seeds must be disjoint ranges, not merely different
seeds. Each split draws from its own range, offset by `SPLIT_SEED_OFFSETS` from a base that `seed` picks
(`envs.splits.derive_seed`), each range at most `MAX_DRAWS` long, all below 2^32 (numpy's seed limit, which some
generators use). Other seeds do not mean other questions, though (a generator with a small question space, or
one that shuffles a fixed word list), so the splits are disjoint by content as well: the test split keeps the
first `eval_size` distinct questions of its range; the train split skips the test questions (it may repeat a
question, as drawing from a generator does); the valid split skips both and repeats none. A range that runs out
before its split is full is one error naming the dataset.

Several names: one dataset per name, interleaved round-robin (index i of a split is dataset i mod n's while each
has items), which is reasoning-gym's `CompositeDataset` with exact sizes. The composite itself is not used: it
draws each item's dataset by weight, so per-dataset sizes are not exact, and it seeds its parts seed + 1,
seed + 2, ..., so two composites seeded one apart share their items. A dataset's problems depend only on its own
name, config, sizes and seed, never on which other names are listed with it.

Cost: a split is generated whole the first time it is used, once per process (cached). Most generators take well
under a millisecond a problem; a few take a third of a second (knight_swap, futoshiki), for which smaller sizes
start faster. The package is imported on first use (about 1.5 s).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from envs.datasets.files import DatasetError
from envs.splits import check_split, derive_seed

PREFIX = "reasoning_gym:"
DEFAULT_SIZE = 1000
"""Train problems per dataset."""
DEFAULT_EVAL_SIZE = 200
"""Held-out problems per dataset (test, and valid); the default `eval_tasks` (200) fits one dataset's test split."""
DEFAULT_SEED = 0
MAX_DRAWS = 2**29
"""Longest seed range of one split, and the range the base seed is drawn from."""
SPLIT_SEED_OFFSETS = {"test": 0, "valid": 2**30, "train": 2**31}
"""Where each split's seed range starts above the base: ranges [base + offset, base + offset + MAX_DRAWS) never
overlap and end below 2^32."""
FULL_CREDIT = 1.0
"""The score that counts as a success."""
MAX_ANSWER_CHARS = 20_000
"""Longer answers score 0 without the scorer: about four times the longest gold answer of reasoning-gym 0.1.25's
datasets at their defaults (palindrome_partitioning's lists of partitions, about 5,000 characters)."""
NOT_DATASETS = {"composite": "list the datasets instead (reasoning_gym:<name>,<name>)"}
"""Registered names that are not datasets of their own."""
_OPTION_KEYS = ("size", "eval_size", "seed", "config")


class ReasoningGymError(DatasetError):
    """A reasoning-gym source that cannot be served; one line naming the dataset or option."""


def is_spec(source: object) -> bool:
    """Whether a `dataset` / `eval_dataset` value names reasoning-gym datasets rather than a file."""
    return isinstance(source, str) and source.startswith(PREFIX)


@functools.cache  # every env made asks (through `registry`); the installed version does not change under us
def package_version() -> str:
    """The installed reasoning-gym version (the package's own `__version__` lags its releases)."""
    try:
        return metadata.version("reasoning_gym")
    except metadata.PackageNotFoundError:
        raise ReasoningGymError("reasoning_gym: sources need the reasoning-gym package (pip install -e '.[rg]')") \
            from None


def registry() -> dict[str, tuple[type, type]]:
    """reasoning-gym's registered datasets: name → (dataset class, config class), without `NOT_DATASETS`."""
    package_version()
    import reasoning_gym  # noqa: F401  (lazy: importing it registers every dataset, about 1.5 s)
    from reasoning_gym.factory import DATASETS

    return {name: classes for name, classes in DATASETS.items() if name not in NOT_DATASETS}


def check_name(name: str) -> str:
    """`name` if reasoning-gym registers it; else one line with the near matches (`difflib`)."""
    if name in NOT_DATASETS:
        raise ReasoningGymError(f"reasoning-gym's {name!r} is not a dataset here: {NOT_DATASETS[name]}")
    known = registry()
    if name not in known:
        near = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.6)
        hint = (f"near matches: {', '.join(near)}" if near
                else f"no name is close; the datasets: {', '.join(sorted(known))}")
        raise ReasoningGymError(f"unknown reasoning-gym dataset {name!r}; {hint}")
    return name


def parse_spec(source: str) -> tuple[str, ...]:
    """`reasoning_gym:a,b` → ("a", "b"), each name checked (`check_name`)."""
    if not is_spec(source):
        raise ReasoningGymError(f"{source!r} is not a reasoning-gym source; expected {PREFIX}<name>[,<name>...]")
    names = tuple(name.strip() for name in source[len(PREFIX):].split(","))
    if not all(names):
        raise ReasoningGymError(f"{source!r}: an empty dataset name; expected {PREFIX}<name>[,<name>...]")
    if len(set(names)) != len(names):
        raise ReasoningGymError(f"{source!r}: a dataset is named twice")
    return tuple(check_name(name) for name in names)


@dataclass(frozen=True)
class RGOptions:
    """How a reasoning-gym source is drawn. size: train problems per dataset (a dataset's own `config[name]["size"]`
    replaces it); eval_size: held-out problems per dataset, in test and again in valid; seed: picks the seed
    ranges (module docstring); config: per dataset, keyword arguments of its reasoning-gym config class (its
    `seed` is refused: the splits' seeds are drawn here)."""

    size: int = DEFAULT_SIZE
    eval_size: int = DEFAULT_EVAL_SIZE
    seed: int = DEFAULT_SEED
    config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, value: RGOptions | Mapping[str, Any] | None) -> RGOptions:
        """Options from themselves, a mapping with keys among size, eval_size, seed, config, or None (defaults);
        checked (`problems`)."""
        if value is None or isinstance(value, RGOptions):
            options = value or cls()
        else:
            unknown = sorted(set(value) - set(_OPTION_KEYS))
            if unknown:
                raise ReasoningGymError(f"reasoning_gym options: unknown key(s) {', '.join(unknown)}; valid: "
                                        f"{', '.join(_OPTION_KEYS)}")
            options = cls(**dict(value))
        if problems := options.problems():
            raise ReasoningGymError("; ".join(problems))
        return options

    def problems(self) -> list[str]:
        """What is wrong with the sizes, seed and config's shape, each naming its key under `reasoning_gym.`
        (the config's names and keys are checked against reasoning-gym by `config_problems`)."""
        out = [f"reasoning_gym.{key}={getattr(self, key)!r} is out of range; allowed: {low}..{high}"
               for key, low, high in (("size", 1, MAX_DRAWS // 2), ("eval_size", 1, MAX_DRAWS // 2),
                                      ("seed", 0, 2**63 - 1))
               if not _int_between(getattr(self, key), low, high)]
        if not isinstance(self.config, Mapping) or not all(isinstance(v, Mapping) for v in self.config.values()):
            return out + [f"reasoning_gym.config={self.config!r}: expected a mapping per dataset, e.g. "
                          "reasoning_gym.config.basic_arithmetic.max_terms=4"]
        for name, kwargs in self.config.items():
            if "seed" in kwargs:
                out.append(f"reasoning_gym.config.{name}.seed: the split seeds come from reasoning_gym.seed")
            if "size" in kwargs and not _int_between(kwargs["size"], 1, MAX_DRAWS // 2):
                out.append(f"reasoning_gym.config.{name}.size={kwargs['size']!r} is out of range; allowed: "
                           f"1..{MAX_DRAWS // 2}")
        return out

    def config_problems(self) -> list[str]:
        """Config entries naming no reasoning-gym dataset, or keys its config class does not have."""
        out = []
        for name, kwargs in self.config.items():
            try:
                _, config_cls = registry()[check_name(name)]
            except ReasoningGymError as exc:
                out.append(f"reasoning_gym.config.{name}: {exc}")
                continue
            fields = [f.name for f in dataclasses.fields(config_cls) if f.name != "seed"]
            out += [f"reasoning_gym.config.{name}.{key}: {name}'s config has no such key; valid: "
                    f"{', '.join(fields)}" for key in kwargs if key not in fields and key != "seed"]
        return out

    def size_of(self, name: str, split: str) -> int:
        """Problems of dataset `name` in `split`."""
        return int(self.config.get(name, {}).get("size", self.size)) if split == "train" else self.eval_size

    def kwargs_of(self, name: str) -> dict[str, Any]:
        """The config keyword arguments of dataset `name` (size and seed are per split, set here)."""
        return {k: v for k, v in self.config.get(name, {}).items() if k not in ("size", "seed")}

    def key_of(self, name: str) -> str:
        """Everything dataset `name`'s problems depend on, as a cache key."""
        return json.dumps([self.size_of(name, "train"), self.eval_size, self.seed, self.kwargs_of(name)],
                          sort_keys=True, default=repr)


def _int_between(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@dataclass(frozen=True)
class RGProblem:
    """One generated problem. id: "reasoning_gym:<name>:<split>:<k>" (k-th of its dataset in the split); answer:
    the entry's oracle answer as text ("" where the dataset has none: several conclusions may be right), for
    display only (grading is `score`); entry: the reasoning-gym item its scorer reads; dataset: the object that
    generated it, whose `score_answer` grades it."""

    id: str
    name: str
    question: str
    answer: str
    entry: dict = field(compare=False, repr=False)
    dataset: Any = field(compare=False, repr=False)

    def score(self, answer: str | None) -> float:
        """The dataset's `score_answer(answer, entry)`, kept finite in [0, 1] (module docstring)."""
        if answer is not None and len(answer) > MAX_ANSWER_CHARS:
            return 0.0
        try:
            value = float(self.dataset.score_answer(answer, self.entry))
        except Exception:  # a scorer's bug on odd text is a wrong answer, never a failed rollout
            return 0.0
        return min(FULL_CREDIT, max(0.0, value)) if math.isfinite(value) else 0.0


_CACHE: dict[tuple[str, str, str], tuple[RGProblem, ...]] = {}
_LOCK = threading.RLock()


def load_split(source: str, split: str,
               options: RGOptions | Mapping[str, Any] | None = None) -> tuple[RGProblem, ...]:
    """The problems of `split` of a `reasoning_gym:` source, its datasets interleaved round-robin (module
    docstring). Raises `ReasoningGymError` (a `DatasetError`) with one line."""
    check_split(split)
    names, options = parse_spec(source), RGOptions.of(options)
    if problems := options.config_problems():
        raise ReasoningGymError("; ".join(problems))
    per_name = [dataset_split(name, split, options) for name in names]
    longest = max(len(problems) for problems in per_name)
    return tuple(problems[k] for k in range(longest) for problems in per_name if k < len(problems))


def dataset_split(name: str, split: str, options: RGOptions) -> tuple[RGProblem, ...]:
    """The problems of one dataset in `split`, generated once per process."""
    key = (name, split, options.key_of(name))
    with _LOCK:  # one generation per key, also when envs are built from several threads (re-entrant: train
        if key not in _CACHE:  # needs test first)
            excluded: set[str] = set()
            if split in ("train", "valid"):
                excluded |= {p.question for p in dataset_split(name, "test", options)}
            if split == "valid":
                excluded |= {p.question for p in dataset_split(name, "train", options)}
            _CACHE[key] = _draw(name, split, options, excluded, distinct=split != "train")
        return _CACHE[key]


def _draw(name: str, split: str, options: RGOptions, excluded: set[str], *,
          distinct: bool) -> tuple[RGProblem, ...]:
    """The first `size_of(name, split)` items of the split's seed range whose question is not excluded."""
    wanted = options.size_of(name, split)
    # room for skipped questions; the dataset is built with this size (a generator may precompute that many)
    draws = min(MAX_DRAWS, 2 * wanted + 100)
    dataset = _create(name, split, options, draws)
    seen, out = set(excluded), []
    for i in range(draws):
        try:
            entry = dataset[i]
        except Exception as exc:  # a generator's own failure at some seed: the dataset, not this item, is unusable
            raise ReasoningGymError(f"reasoning-gym dataset {name!r} failed on its {split} item {i}: "
                                    f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
        question = str(entry["question"])
        if question in seen:
            continue
        if distinct:
            seen.add(question)
        answer = "" if entry.get("answer") is None else str(entry["answer"])
        out.append(RGProblem(f"{PREFIX}{name}:{split}:{len(out)}", name, question, answer, entry, dataset))
        if len(out) == wanted:
            return tuple(out)
    raise ReasoningGymError(f"reasoning-gym dataset {name!r}: {len(out)} of {wanted} {split} problems after "
                            f"{draws} draws (its questions repeat, or are held out); lower reasoning_gym.size / "
                            "eval_size or widen its config")


def _create(name: str, split: str, options: RGOptions, draws: int) -> Any:
    """reasoning-gym's dataset `name` over the split's seed range."""
    import reasoning_gym

    base = derive_seed("reasoning_gym", options.seed) % MAX_DRAWS
    try:
        return reasoning_gym.create_dataset(name, seed=base + SPLIT_SEED_OFFSETS[split], size=draws,
                                            **options.kwargs_of(name))
    except (TypeError, ValueError, AssertionError) as exc:  # an unknown key, or a value its validate() refuses
        raise ReasoningGymError(f"reasoning-gym dataset {name!r} refuses reasoning_gym.config.{name}="
                                f"{options.kwargs_of(name)}: {' '.join(str(exc).split()) or type(exc).__name__}") \
            from None
