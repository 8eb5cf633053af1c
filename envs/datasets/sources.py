"""Where a math env's problems come from, for run metadata and evaluation settings: a local file (its resolved path,
and a fingerprint of its bytes), or reasoning-gym datasets (`reasoning_gym:<name>,...`: the source as written, and
the reasoning-gym version that generates them, since the same seeds give other problems under another version)."""

from __future__ import annotations

from pathlib import Path

from envs.datasets.files import fingerprint
from envs.datasets.reasoning_gym import is_spec, package_version


def source_location(source: str) -> str:
    """The file's resolved path, or the reasoning-gym source as it is."""
    return source if is_spec(source) else str(Path(source).resolve())


def source_fingerprint(source: str) -> str:
    """Same fingerprint, same problems: the file's `fingerprint`, or "reasoning-gym <version>"."""
    return f"reasoning-gym {package_version()}" if is_spec(source) else fingerprint(source)
