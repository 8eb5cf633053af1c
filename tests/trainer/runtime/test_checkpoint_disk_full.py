"""A checkpoint that does not fit on its disk: one clear error, no partial files, and `latest` still resumable.

The disk is real: a small tmpfs mounted for the test (needs root or CAP_SYS_ADMIN; skipped otherwise), filled by
the checkpoints themselves (the same failure a too-small output_dir gives: torch's "unexpected pos", safetensors'
"No space left on device").
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_tir import SMALL

from agents.models import build_tiny_model, load_model_and_tokenizer
from trainer.runtime.checkpoint import (
    DiskFullError,
    checkpoint_dir,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
    tensor_bytes,
)
from trainer.sft import resume as sft_resume


def _mount_tmpfs(path: Path, size_bytes: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); needs root")


@pytest.fixture
def small_disk(tmp_path):
    """Mounts a tmpfs of the requested size at tmp_path/disk_<n>; unmounted after the test."""
    mounted: list[Path] = []

    def mount(size_bytes: int) -> Path:
        path = tmp_path / f"disk_{len(mounted)}"
        _mount_tmpfs(path, size_bytes)
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _tiny(tokenizer, seed: int = 0):
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()  # Adam's moments exist only after a step: the trainer state is then its full size
    return model, optimizer


def test_full_disk_keeps_previous_checkpoint_and_says_so(small_disk, tiny_tokenizer):
    model, optimizer = _tiny(tiny_tokenizer)
    per_checkpoint = tensor_bytes([model.state_dict(), optimizer.state_dict()])
    run = small_disk(int(per_checkpoint * 2.5))  # two fit, the third does not
    saved = []
    with pytest.raises(DiskFullError) as err:
        for step in range(1, 10):
            with torch.no_grad():
                next(model.parameters()).add_(1.0)  # each checkpoint differs, so loading the wrong one shows
            saved.append((step, next(model.parameters()).detach().clone()))
            save_checkpoint(run, step, model, tiny_tokenizer, optimizer, keep=10)
    failed_step, _ = saved.pop()
    assert len(saved) >= 1, "the disk should hold at least one checkpoint"
    message = str(err.value)
    failed = checkpoint_dir(run) / f"step_{failed_step}"
    assert message.startswith(f"cannot write checkpoint {failed}: the disk is full"), message
    assert "\n" not in message and err.value.errno == errno.ENOSPC
    last_step, last_weights = saved[-1]
    previous = checkpoint_dir(run) / f"step_{last_step}"
    for part in (f"step_{failed_step}", "MB free", "MB needed", "output_dir=", str(previous), "--resume"):
        assert part in message, (part, message)

    # nothing partial left behind, and `latest` names the last complete checkpoint
    assert sorted(p.name for p in checkpoint_dir(run).iterdir()) == ["latest"] + [f"step_{s}" for s, _ in saved]
    assert latest_checkpoint(run) == previous
    loaded, _ = load_model_and_tokenizer(str(previous))
    assert torch.equal(next(loaded.parameters()), last_weights)
    assert load_trainer_state(previous, _tiny(tiny_tokenizer, seed=1)[1])["step"] == last_step


def test_first_checkpoint_on_full_disk_says_there_is_none_to_resume(small_disk, tiny_tokenizer):
    model, optimizer = _tiny(tiny_tokenizer)
    run = small_disk(64 * 1024)
    with pytest.raises(DiskFullError, match="no earlier checkpoint"):
        save_checkpoint(run, 1, model, tiny_tokenizer, optimizer)
    assert latest_checkpoint(run) is None
    assert [p.name for p in checkpoint_dir(run).iterdir()] == []


def test_other_save_failures_are_not_reported_as_a_full_disk(tmp_path, tiny_tokenizer):
    model, optimizer = _tiny(tiny_tokenizer)
    with pytest.raises(Exception) as err:  # an unpicklable extra, with plenty of disk: the original error stands
        save_checkpoint(tmp_path, 1, model, tiny_tokenizer, optimizer, extra={"bad": lambda: None})
    assert not isinstance(err.value, DiskFullError), err.value
    assert "pickle" in str(err.value).lower()
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == []  # the partial step is removed all the same


@pytest.mark.smoke
def test_cli_train_on_a_full_disk_prints_one_line_and_exits_2(small_disk, tiny_model_dir, tiny_tokenizer):
    model, optimizer = _tiny(tiny_tokenizer)
    out = small_disk(int(tensor_bytes([model.state_dict(), optimizer.state_dict()]) * 1.6))  # one fits
    cmd = [sys.executable, "-m", "app.cli", "train", "--no-progress", f"model.path={tiny_model_dir}",
           f"output_dir={out}", "steps=3", "save_every=1", "torch_threads=1", *SMALL,
           "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("alprl train: error: cannot write checkpoint"), done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "enforce fail" not in done.stderr, done.stderr[-3000:]
    assert "MB free" in lines[-1] and "step_1 is kept" in lines[-1], lines[-1]
    assert latest_checkpoint(out) == checkpoint_dir(out) / "step_1"
    # steps=1: --resume loads step 1 and has nothing left to do (so it writes nothing to the full disk)
    resumed = subprocess.run([*cmd[:5], "--resume", *[a for a in cmd[5:] if a != "steps=3"], "steps=1"],
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_sft_resume_point_on_full_disk_keeps_the_earlier_one(small_disk, tiny_tokenizer):
    model, optimizer = _tiny(tiny_tokenizer)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    out = small_disk(int(tensor_bytes([model.state_dict(), optimizer.state_dict()]) * 1.5))  # not two at once
    sft_resume.resume_dir(out).mkdir()
    sft_resume.save_state(out, "fp", 5, [1.0] * 5, model, optimizer, schedule)
    with pytest.raises(DiskFullError) as err:
        sft_resume.save_state(out, "fp", 10, [1.0] * 10, model, optimizer, schedule)
    assert "the SFT resume point" in str(err.value) and "of an earlier step is kept" in str(err.value)
    assert [p.name for p in sft_resume.resume_dir(out).iterdir()] == [sft_resume.STATE_FILE]
    assert sft_resume.saved_step(out, "fp") == 5


def _fill(path: Path) -> None:
    """Write zeros to `path` until the disk refuses more."""
    with path.open("wb", buffering=0) as f:  # unbuffered: close() has nothing left to write
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


# TensorBoard's writer thread re-raises the error it stored for add_scalar: unsilenced, it would print a traceback.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_metrics_record_on_a_full_disk_is_one_error_and_the_file_stays_whole(small_disk):
    from trainer.runtime.logger import MetricLogger, read_metrics

    run = small_disk(256 * 1024)
    logger = MetricLogger(run)
    try:
        logger.log(1, {"loss/policy": 0.5})
        _fill(run / "filler")
        with pytest.raises(DiskFullError) as err:
            for step in range(2, 200):  # the page cache may take a few records before the disk refuses one
                logger.log(step, {"loss/policy": 0.5, "pad": float(step)})
                os.sync()
    finally:
        (run / "filler").unlink(missing_ok=True)
        logger.close()
    message = str(err.value)
    assert message.startswith("cannot write the metrics of step ") and str(run / "metrics.jsonl") in message
    assert "\n" not in message and "no checkpoint was saved yet" in message and "MB free" in message
    records = read_metrics(run)  # every line left is a whole record
    assert records[0] == {"step": 1, "loss/policy": 0.5}


def test_other_thread_errors_still_reach_the_excepthook(tmp_path):
    """Only TensorBoard's own disk-full error is kept quiet: a full disk in any other thread is still reported."""
    import threading

    from trainer.runtime.logger import MetricLogger

    MetricLogger(tmp_path).close()  # installs the hook
    seen = []
    wrapped = threading.excepthook
    try:
        threading.excepthook = seen.append  # what the quiet hook wraps next time: install it over this one
        MetricLogger(tmp_path / "again").close()

        def fails() -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        worker = threading.Thread(target=fails)
        worker.start()
        worker.join()
    finally:
        threading.excepthook = wrapped
    assert [type(a.exc_value) for a in seen] == [OSError] and seen[0].thread is worker
