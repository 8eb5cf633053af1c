"""`source_commit`: the commit and dirtiness of the checkout a run's code came from, read with real git."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from trainer.runtime.run_meta import source_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_clean_checkout_then_an_edited_one(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "metrics.jsonl").write_text("{}\n")  # untracked output does not make it dirty
    assert source_commit(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "a.py").write_text("x = 2\n")
    assert source_commit(tmp_path) == {"commit": head, "dirty": True}


def test_outside_a_checkout_there_is_no_source(tmp_path):
    assert source_commit(tmp_path) is None
