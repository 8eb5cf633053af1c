"""Each default written once: a library parameter named after a config key carries no default of its own that
differs from the config's (shared reference/style.md §6).

The config (trainer/config/) writes a run's defaults. The library below it (sandbox, envs, agents, evaluation)
cannot import it, so a setting there is either keyword-only without a default (the trainer passes the config's
value) or defaults to a named constant of the library's own layer that the config field takes as its default too
(`envs.tir_defaults.DEFAULT_MAX_TURNS`, `sandbox.settings.RUN_TIMEOUT_S`): one writer either way. A library default that
differs from the config's means `gym.make(...)`, a test or a bench runs something else than `alprl train` says.

Matching rule: a parameter (of a function, or a field of a dataclass or pydantic model) matches the config keys
whose last name is the parameter's, in the config sections its package serves (`SECTIONS`). It differs when its
default equals none of them; None counts as equal to an empty config default ('' / [] / {}), the config's
spelling of "not set". `ALLOWED` names the parameters that mean something else than the key they share a name
with, each with its reason. Defaults are read from the source with `ast`, named constants followed to where they
are assigned; a default the source alone does not give (an expression, another package's attribute) counts as
differing. No library module is imported.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import functools
import inspect
import textwrap
from pathlib import Path
from typing import Any

from trainer.config.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]

SECTIONS = {
    "sandbox": ("",),
    "envs": ("", "env", "env.reasoning_gym", "env.openenv", "sft"),
    "agents": ("", "model", "rollout", "perturb", "env"),
    "evaluation": ("", "rollout", "perturb", "env"),
}
"""Library package → the config sections (dotted; "" the top level) whose keys its parameters may restate."""

ALLOWED = {
    "*.reset(seed)": "Gymnasium's per-reset seed (None: keep the RNG), not the run's seed",
    "*.submit(seed)": "a request's own sampling seed (None: the engine's stream), not the run's seed",
    "*.generate(seed)": "a request's own sampling seed (None: the engine's stream), not the run's seed",
    "agents.rollout.run_episodes(seed)": "the batch's sampling seed (None: unseeded requests), not the run's seed",
    "agents.endpoint.service.EndpointSettings(seed)": "the batch's sampling seed, as run_episodes'",
    "envs.unicode_text.UnicodeText.__init__(seed)": "a Gymnasium space's sampling seed",
    "envs.*(max_steps)": "env.max_steps=0 defers to the env's own step limit, written once in each env",
    "envs.tir.tasks.*(difficulty)": "the generator's filter, None the unfiltered split; the envs take env.difficulty's",
    "envs.tir.problems.ProblemSource.__init__(difficulty)": "the generator's filter, as generate_task's",
    "agents.models.load_model_and_tokenizer(dtype)": "the trainer's copy of the policy (fp32), not the sampler's",
    "evaluation.robustness_run.run_robustness(dtype)": "the evaluated model's dtype, not the rollout sampler's",
    "evaluation.robustness.fake_quantize(group_size)": "a quantization group (rollout.sampler_quant_group), not a "
                                                       "GRPO group",
    "envs.webshop.goals.sample_goal(style)": "the phrasing of a WebShop goal, not the TIR convention",
    "evaluation.long_horizon.Events(steps)": "the steps at which events happened, not the run's length",
}
"""`module.function(parameter)` patterns (fnmatch) → why the name matches a config key but not its meaning."""

UNSET = object()  # a name the source does not assign


def config_defaults(cls: type = TrainConfig, prefix: str = "") -> dict[str, Any]:
    """Every leaf key of the config tree (`section.key`, dotted) → its default."""
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out.update(config_defaults(type(default), f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = default
    return out


def config_sources(cls: type = TrainConfig, prefix: str = "") -> dict[str, str]:
    """Every leaf key of the config tree → its default as the config's source writes it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    written = {stmt.target.id: _field_default(stmt.value)[0] for stmt in tree.body[0].body
               if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None}
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out.update(config_sources(type(default), f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = ast.unparse(written[f.name])
    return out


def names_a_constant(source: str) -> bool:
    """Whether a default is written as a named constant (`RUN_TIMEOUT_S`, `rg.DEFAULT_SIZE`), not a value."""
    node = ast.parse(source, mode="eval").body
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.isupper()


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclasses.dataclass(frozen=True)
class Unresolved:
    """A default the source alone does not give the value of (an expression, another package's attribute): it
    equals no config default."""

    source: str


FACTORIES = {"list": list, "dict": dict, "tuple": tuple, "set": set}


class Resolver:
    """Values of default expressions from the source alone, no module imported: literals, and named constants
    followed through the repository's imports to where they are assigned."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        self.trees: dict[str, ast.Module | None] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.trees:
            base = self.root.joinpath(*module.split("."))
            path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
            self.trees[module] = ast.parse(path.read_text()) if path else None
        return self.trees[module]

    def value(self, node: ast.expr, module: str, depth: int = 0) -> Any:
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
        if isinstance(node, ast.Name) and node.id in FACTORIES:  # a record field's default_factory
            return FACTORIES[node.id]
        if depth < 5:
            if isinstance(node, ast.Name):
                found = self.name(node.id, module, depth)
                if found is not UNSET:
                    return found
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = self.imported_module(node.value.id, module)
                if target and self.tree(target):
                    found = self.name(node.attr, target, depth)
                    if found is not UNSET:
                        return found
        return Unresolved(ast.unparse(node))

    def name(self, name: str, module: str, depth: int) -> Any:
        tree = self.tree(module)
        for stmt in tree.body if tree else ():
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                return self.value(stmt.value, module, depth + 1)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name \
                    and stmt.value is not None:
                return self.value(stmt.value, module, depth + 1)
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        return self.value(ast.Name(alias.name), self.absolute(stmt, module), depth + 1)
        return UNSET

    def imported_module(self, name: str, module: str) -> str | None:
        tree = self.tree(module)
        for stmt in tree.body if tree else ():
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        return alias.name
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        return f"{self.absolute(stmt, module)}.{alias.name}"
        return None

    def absolute(self, stmt: ast.ImportFrom, module: str) -> str:
        if not stmt.level:
            return stmt.module or ""
        is_package = self.root.joinpath(*module.split("."), "__init__.py").is_file()
        parts = module.split(".")[: len(module.split(".")) - stmt.level + is_package]
        return ".".join(parts + ([stmt.module] if stmt.module else []))


def _is_record(cls: ast.ClassDef) -> bool:
    """A dataclass or a pydantic model: its annotated class attributes are constructor parameters."""
    names = {ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list}
    return bool(names & {"dataclass", "dataclasses.dataclass"}) or any(
        ast.unparse(b) in ("BaseModel", "pydantic.BaseModel") for b in cls.bases)


def _field_default(node: ast.expr) -> tuple[ast.expr | None, bool]:
    """(the default expression, whether it is a factory) of a record field's value; (None, _) when it has none."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field", "Field"):
        kw = {k.arg: k.value for k in node.keywords}
        if "default" in kw:
            return kw["default"], False
        if "default_factory" in kw:
            factory = kw["default_factory"]
            if isinstance(factory, ast.Lambda) and not factory.args.args:  # `lambda: [0.9, 0.99]`: its value
                return factory.body, False
            return factory, True
        return (node.args[0], False) if node.args and ast.unparse(node.func) == "Field" else (None, False)
    return node, False


def parameters(tree: ast.Module):
    """(qualified function or record name, parameter, default expression, is a factory) of every parameter with a
    default, methods and nested functions included."""

    def visit(node: ast.AST, qual: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{qual}{child.name}"
                a = child.args
                positional = a.posonlyargs + a.args
                for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True):
                    yield name, arg.arg, default, False
                for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
                    if default is not None:
                        yield name, arg.arg, default, False
                yield from visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                name = f"{qual}{child.name}"
                if _is_record(child):
                    for stmt in child.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                            default, factory = _field_default(stmt.value)
                            if default is not None:
                                yield name, stmt.target.id, default, factory
                yield from visit(child, f"{name}.")
            else:
                yield from visit(child, qual)

    yield from visit(tree, "")


def same(library: Any, config: Any) -> bool:
    if library is None:
        return config in ("", [], {})
    if isinstance(library, bool) or isinstance(config, bool):
        return type(library) is type(config) and library == config
    if isinstance(library, tuple | list) and isinstance(config, tuple | list):
        return list(library) == list(config)
    return library == config


@dataclasses.dataclass
class Match:
    where: str  # module.function(parameter)
    default: Any
    source: str  # the default as written
    keys: dict[str, Any]  # the config keys of that name in the package's sections → their defaults

    @property
    def differs(self) -> bool:
        return not any(same(self.default, d) for d in self.keys.values())

    @property
    def allowed(self) -> str | None:
        return next((why for pattern, why in ALLOWED.items() if fnmatch.fnmatchcase(self.where, pattern)), None)

    def __str__(self) -> str:
        keys = ", ".join(f"{k}={v!r}" for k, v in self.keys.items())
        return f"{self.where.removesuffix(')')}={self.source}) vs {keys}"


def scan(root: Path = ROOT, sections: dict[str, tuple[str, ...]] = SECTIONS,
         defaults: dict[str, Any] | None = None) -> list[Match]:
    """Every library parameter with a default whose name is a config key of its package's sections."""
    defaults = config_defaults() if defaults is None else defaults
    resolver, found = Resolver(root), []
    for package, wanted in sections.items():
        by_name: dict[str, dict[str, Any]] = {}
        for key, value in defaults.items():
            section, _, leaf = key.rpartition(".")
            if section in wanted:
                by_name.setdefault(leaf, {})[key] = value
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            resolver.trees[module] = tree = ast.parse(path.read_text(), str(path))
            for qual, param, node, factory in parameters(tree):
                if param not in by_name:
                    continue
                value = resolver.value(node, module)
                if factory and callable(value):
                    value = value()
                found.append(Match(f"{module}.{qual}({param})", value, ast.unparse(node), by_name[param]))
    return found


@functools.cache
def repository_matches() -> tuple[Match, ...]:
    return tuple(scan())


def test_no_library_default_differs_from_the_configs():
    offenders = [m for m in repository_matches() if m.differs and not m.allowed]
    assert not offenders, ("library parameters named after a config key with another default (take the setting "
                           "keyword-only without a default, or share one named constant with the config):\n  "
                           + "\n  ".join(map(str, offenders)))


def test_a_shared_constant_is_named_by_the_config_too():
    """Where the library's default is a named constant, the config field names it as well instead of repeating its
    value, so changing the constant changes both."""
    sources = config_sources()
    restated = [f"{m} (the config writes {', '.join(f'{k}={sources[k]}' for k in m.keys)})"
                for m in repository_matches()
                if not m.differs and names_a_constant(m.source)
                and not any(names_a_constant(sources[k]) for k, d in m.keys.items() if same(m.default, d))]
    assert not restated, "config fields that repeat a library constant's value:\n  " + "\n  ".join(restated)


def test_every_allowance_is_used():
    matches = [m for m in repository_matches() if m.differs]
    unused = [p for p in ALLOWED if not any(fnmatch.fnmatchcase(m.where, p) for m in matches)]
    assert not unused, f"ALLOWED entries that match no differing parameter any more (remove them): {unused}"


def test_the_scan_catches_a_planted_offender(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("")
    (tmp_path / "agents" / "planted.py").write_text(
        "from dataclasses import dataclass, field\n"
        "TURNS = 5\n"
        "class Engine:\n"
        "    def __init__(self, *, temperature=0.7, top_p=1.0, dtype, max_turns=TURNS, sandbox_url=None):\n"
        "        pass\n"
        "@dataclass\n"
        "class Limits:\n"
        "    stop_token_ids: list = field(default_factory=lambda: [7])\n")
    defaults = {"rollout.temperature": 1.0, "rollout.top_p": 1.0, "rollout.dtype": "bfloat16",
                "env.max_turns": 3, "env.sandbox_url": "", "rollout.stop_token_ids": []}
    matches = scan(tmp_path, {"agents": ("rollout", "env")}, defaults)
    assert sorted(str(m) for m in matches if m.differs) == [
        "agents.planted.Engine.__init__(max_turns=TURNS) vs env.max_turns=3",
        "agents.planted.Engine.__init__(temperature=0.7) vs rollout.temperature=1.0",
        "agents.planted.Limits(stop_token_ids=[7]) vs rollout.stop_token_ids=[]",
    ]
    assert {m.where for m in matches if not m.differs} == {"agents.planted.Engine.__init__(top_p)",
                                                           "agents.planted.Engine.__init__(sandbox_url)"}
    assert names_a_constant("TURNS") and names_a_constant("rg.DEFAULT_SIZE") and not names_a_constant("5")
