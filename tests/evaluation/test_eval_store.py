"""evaluation.eval_store on real files: chunks appended and read back, what a kill leaves behind dropped on reopening,
other settings refused (one error naming the keys) unless forced."""

from __future__ import annotations

import json

import pytest

from evaluation.eval_store import RECORDS_FILE, SETTINGS_FILE, RecordStore, SettingsMismatch

SETTINGS = {"model": "/m", "benchmarks": {"a": {"samples_per_task": 2, "limits": {"max_new_tokens": 64}}}}


def _chunk(start: int, n: int) -> list[dict]:
    return [{"index": (start + i) // 2, "sample": (start + i) % 2, "won": i % 2 == 0} for i in range(n)]


def test_chunks_are_stored_and_read_back_per_benchmark_in_order(tmp_path):
    store = RecordStore(tmp_path, SETTINGS)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == SETTINGS
    store.append("a", 4, _chunk(4, 2))
    store.append("a", 0, _chunk(0, 4))
    store.append("b", 0, _chunk(0, 2))
    got = store.by_benchmark()
    assert [(r["index"], r["sample"]) for r in got["a"]] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert {r["chunk"] for r in got["a"]} == {0, 4} and all(r["bench"] == "b" for r in got["b"])


def test_reopening_keeps_complete_chunks_and_drops_what_a_kill_left(tmp_path):
    store = RecordStore(tmp_path, SETTINGS)
    store.append("a", 0, _chunk(0, 4))
    store.append("a", 4, _chunk(4, 4)[:3])  # a chunk cut after 3 of its 4 lines
    with open(tmp_path / RECORDS_FILE, "a") as f:
        f.write('{"bench": "a", "chunk": 8, "ind')  # and a line cut in the middle
    again = RecordStore(tmp_path, SETTINGS)
    kept = again.keep_complete({("a", 0): 4, ("a", 4): 4, ("a", 8): 2})
    assert list(kept) == [("a", 0)] and len(kept[("a", 0)]) == 4
    lines = (tmp_path / RECORDS_FILE).read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["chunk"] == 0 for line in lines)  # the file holds only those


def test_other_settings_are_one_error_naming_the_keys_and_force_starts_over(tmp_path):
    RecordStore(tmp_path, SETTINGS).append("a", 0, _chunk(0, 2))
    other = {**SETTINGS, "benchmarks": {"a": {"samples_per_task": 4, "limits": {"max_new_tokens": 64}}}}
    with pytest.raises(SettingsMismatch) as info:
        RecordStore(tmp_path, other)
    message = str(info.value)
    assert "\n" not in message and "benchmarks.a.samples_per_task: 2 -> 4" in message and "--force" in message
    assert "max_new_tokens" not in message  # only what differs
    fresh = RecordStore(tmp_path, other, force=True)
    assert fresh.by_benchmark() == {} and json.loads((tmp_path / SETTINGS_FILE).read_text()) == other
