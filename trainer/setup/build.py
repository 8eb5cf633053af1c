"""Building a run's config: the one order every command layers it in, then validation.

Defaults (the dataclasses of trainer/config/) ← preset ← recipe ← command line, later wins. Presets
(`configs/algorithms/<name>.yaml`, data) sit between the dataclass defaults and the recipe: the preset is the
recipe's `algorithm: <name>` or, in its place, `algorithm=<name>` on the command line. `build_config` ends with
trainer/setup/validation.py's `validate_config`, so every caller sees the same rules; the CLI turns a `ConfigError`
into one line on stderr and exit status 2.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from trainer.config.errors import ConfigError
from trainer.config.train_config import CONFIG_DIR, TrainConfig, apply_layer, load_yaml, parse_overrides
from trainer.setup.validation import validate_config


def algorithm_presets() -> list[str]:
    """The preset names, one per file of configs/algorithms/."""
    return sorted(p.stem for p in (CONFIG_DIR / "algorithms").glob("*.yaml"))


def load_preset(name: Any, where: str = "") -> dict[str, Any]:
    """Preset `name` (configs/algorithms/<name>.yaml) as a config layer: its keys under `algo`, with `algo.name`, and
    its `perturb` section beside them (ALP, SPrPO). `where` (the recipe that names it) prefixes the error."""
    if not isinstance(name, str) or name not in algorithm_presets():
        raise ConfigError(f"{where}unknown algorithm '{name}'; valid: {', '.join(algorithm_presets())}")
    preset = load_yaml(CONFIG_DIR / "algorithms" / f"{name}.yaml")
    perturb = preset.pop("perturb", {})
    return {"algo": {"name": name, **preset}, "perturb": perturb}


def config_layers(config_path: str | Path | dict[str, Any] | None,
                  overrides: list[str] = ()) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], bool]:
    """(preset, recipe, command line) as nested mappings, and whether the preset was named on the command line.

    The preset is `algorithm=` on the command line, else the recipe's own `algorithm:` key, else none."""
    if isinstance(config_path, dict):
        recipe, where = copy.deepcopy(config_path), ""
    else:
        recipe, where = (load_yaml(config_path) if config_path else {}), f"{config_path}: algorithm: "
    cli = parse_overrides(list(overrides))
    own, named = recipe.pop("algorithm", None), cli.pop("algorithm", None)
    own_preset = load_preset(own, where) if own is not None else {}  # checked even where the command line's replaces it
    if named is not None:
        return load_preset(named), recipe, cli, True
    return own_preset, recipe, cli, False


def build_config(config_path: str | Path | dict[str, Any] | None = None, overrides: list[str] = (), *,
                 layered: list[str] = ()) -> TrainConfig:
    """The one order every command builds a config in, later wins: defaults ← preset ← recipe (the YAML file, or its
    mapping already read) ← `layered` ← key=value overrides.

    A recipe names its preset (`algorithm: grpo`) and its own keys win over the preset's. `algorithm=` on the command
    line takes the recipe's preset's place, below the recipe's keys (`preset_notes` says where the recipe keeps a
    value of its own over it); the command line's keys win over all. `layered` (key=value) is what a caller states it
    sets on top of the recipe: `alprl experiment` layers each cell's method preset there (`preset_overrides`), so a
    suite compares the methods as their presets define them, and names those keys in the cell; `alprl train` layers
    nothing.
    """
    preset, recipe, cli, _ = config_layers(config_path, overrides)
    cfg = TrainConfig()
    for layer in (preset, recipe, parse_overrides(list(layered)), cli):
        apply_layer(cfg, layer)
    validate_config(cfg)
    return cfg


def preset_overrides(name: str) -> list[str]:
    """Preset `name`'s keys as key=value pairs (its `algo.*` and `perturb.*` values), for a layer that states them."""
    layer = load_preset(name)
    layer["algo"].pop("name")

    def text(value: Any) -> str:  # YAML's own spelling, so parse_overrides reads back the same value
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()

    def pairs(node: dict[str, Any], prefix: str) -> list[str]:
        return [item for k, v in node.items()
                for item in (pairs(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}={text(v)}"])]

    return pairs(layer, "")


def _flat(nested: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of a nested layer (a section left empty has none)."""
    return [key for k, v in nested.items()
            for key in (_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])]


def preset_notes(config_path: str | Path | None, overrides: list[str] = ()) -> list[str]:
    """One line when the recipe keeps values of its own over a preset named on the command line ([] otherwise), with
    the keys that would run the preset's values instead."""
    preset, recipe, cli, named = config_layers(config_path, overrides)
    if not named:
        return []
    by_preset, by_recipe = TrainConfig(), TrainConfig()
    apply_layer(by_preset, preset)
    apply_layer(by_recipe, recipe)
    shared = [k for k in _flat(preset) if k in _flat(recipe) and k not in _flat(cli) and k != "algo.name"]
    differ = [(k, _get(by_recipe, k), _get(by_preset, k)) for k in shared if _get(by_recipe, k) != _get(by_preset, k)]
    if not differ:
        return []
    name = preset["algo"]["name"]
    return [f"{config_path} keeps {', '.join(f'{k}={mine}' for k, mine, _ in differ)} over preset {name}'s "
            f"{', '.join(str(theirs) for _, _, theirs in differ)} (a recipe's keys win over its preset's); to run the "
            f"preset's, add {' '.join(f'{k}={theirs}' for k, _, theirs in differ)}"]


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg

