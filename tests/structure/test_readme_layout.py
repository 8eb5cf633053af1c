"""README's Layout block names every package room and nothing that is not there.

A room is a folder with an `__init__.py` directly under one of alprl's packages; the block lists it as an indented
"name/" line under its package's line. A renamed or added room fails here until README says so.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sandbox", "envs", "agents", "evaluation", "trainer", "app")


def layout_block() -> str:
    text = (ROOT / "README.md").read_text()
    body = text.split("## Layout", 1)[1]
    return body.split("```", 2)[1]


def listed_rooms() -> dict[str, set[str]]:
    """Package → the rooms its indented lines name."""
    rooms: dict[str, set[str]] = {}
    package = None
    for line in layout_block().splitlines():
        top = re.match(r"([a-z_]+)/\s", line)
        if top:
            package = top.group(1)
            rooms.setdefault(package, set())
            continue
        room = re.match(r"  ([a-z_]+)/\s", line)
        if room and package is not None:
            rooms[package].add(room.group(1))
    return rooms


def test_every_room_is_in_readmes_layout_and_every_listed_room_exists():
    listed = listed_rooms()
    for package in PACKAGES:
        actual = {d.name for d in (ROOT / package).iterdir() if (d / "__init__.py").is_file()}
        assert package in listed, f"README's Layout has no line for {package}/"
        assert listed[package] == actual, (
            f"{package}/: rooms on disk {sorted(actual)}, in README's Layout {sorted(listed[package])}")


def test_every_listed_doc_exists():
    named = set(re.findall(r"([a-z_]+\.md)", layout_block().split("docs/", 1)[1]))
    on_disk = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert named == on_disk, f"docs/*.md on disk {sorted(on_disk)}, named in README's Layout {sorted(named)}"
