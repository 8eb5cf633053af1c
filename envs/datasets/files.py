"""Reading rows from local JSONL, JSON and parquet files, and fingerprinting them for run metadata.

Each row comes back with its 1-based position: the line number for JSONL (blank lines are skipped but counted, so
the number is the one an editor shows), the index in the list for JSON, the row index for parquet. JSON files hold
a list of rows or an object with the list under "data", "rows", "examples" or "instances" (the keys used by the
published JSON dumps); a `.json` file holding one object per line is read as JSON Lines, and so is a file with any
suffix other than `.json`, `.parquet` or `.pq`. Parquet needs pyarrow, imported only when a parquet file is read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

JSON_LIST_KEYS = ("data", "rows", "examples", "instances")
PARQUET_SUFFIXES = (".parquet", ".pq")
MAX_INT_DIGITS = 4000  # below CPython's int_max_str_digits (4300), which json's int() would raise at


def _json_int(digits: str) -> int | str:
    """A JSON integer as an int, or its digits as a string when it is too long for `int()` (a 5,000-digit gold
    answer stays a row the loader can judge, not a ValueError that ends the file)."""
    return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else digits


class DatasetError(ValueError):
    """A dataset file that cannot be loaded; the one-line message names the file, and the row and field if any."""


def fingerprint(path: str | Path, length: int = 16) -> str:
    """Short sha256 of the file's bytes (hex), for run metadata: same bytes, same fingerprint."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    return digest.hexdigest()[:length]


def read_rows(path: Path) -> list[tuple[int, dict]]:
    """All rows of a dataset file as (1-based row number, row dict)."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DatasetError(f"{path}: empty file (no rows)")
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        rows = _read_parquet(path)
    elif suffix == ".json":
        rows = _read_json(path)
    else:
        rows = _read_jsonl(path)
    if not rows:
        raise DatasetError(f"{path}: empty file (no rows)")
    for number, row in rows:
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: row {number}: expected an object, got {type(row).__name__}")
    return rows


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line, parse_int=_json_int)))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}: row {number}: invalid JSON line ({e.msg} at column {e.colno}; "
                                   "truncated file?)") from None
            except RecursionError:
                raise DatasetError(f"{path}: row {number}: JSON nested too deeply to read") from None
    return rows


def _read_json(path: Path) -> list[tuple[int, dict]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_int=_json_int)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # one object per line: a JSON Lines file named .json
            return _read_jsonl(path)
        raise DatasetError(f"{path}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise DatasetError(f"{path}: JSON nested too deeply to read") from None
    if isinstance(data, dict):
        key = next((k for k in JSON_LIST_KEYS if isinstance(data.get(k), list)), None)
        if key is None:
            raise DatasetError(f"{path}: a JSON object without a list of rows under any of {list(JSON_LIST_KEYS)}")
        data = data[key]
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    return list(enumerate(data, start=1))


def _read_parquet(path: Path) -> list[tuple[int, dict]]:
    try:
        import pyarrow.parquet as pq  # lazy: only parquet files need pyarrow
    except ImportError:
        raise DatasetError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError subclasses for corrupt files
        raise DatasetError(f"{path}: unreadable parquet ({' '.join(str(e).split())})") from None
    return list(enumerate(table.to_pylist(), start=1))
