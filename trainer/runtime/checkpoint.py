"""The only writer of checkpoints.

Layout: `<run>/checkpoints/step_<k>/` holds a Hugging Face model directory (safetensors weights, config,
generation config, tokenizer: loadable by transformers and vLLM), the run's resolved config
(`alprl_config.yaml`, read back by `alprl eval` and `alprl robustness`) and `trainer_state.pt` (optimizer state,
step, RNG states) for `--resume`. `<run>/checkpoints/latest` names the newest complete checkpoint; it is
written last (under a temporary name, then renamed), so an interrupted save never becomes the resume point.

A save that does not fit on its disk raises DiskFullError naming the directory, the free space and the
bytes needed; its partial files are removed and `latest` still names the previous checkpoint.

A LoRA policy (`model.lora.r` > 0, trainer/runtime/lora.py) is saved as its adapters alone, in peft's layout
(`adapter_config.json`, `adapter_model.safetensors`: `PeftModel.from_pretrained(<start model>, dir)` loads them)
beside the tokenizer, config and trainer state (the optimizer's state is the adapters'); with
`model.lora.export_merged` the merged model is a Hugging Face directory in `<checkpoint>/merged/` as well.

Under FSDP (trainer/runtime/distributed.py) every rank also writes its shards of the model and optimizer with
`torch.distributed.checkpoint` (trainer/runtime/checkpoint_sharded.py) and its RNG states; rank 0 writes the rest
(the Hugging Face export from the gathered weights, the config, `trainer_state.pt` without the optimizer).
"""

from __future__ import annotations

import errno
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.config.errors import ConfigError
from trainer.config.run_config import write_run_config
from trainer.config.train_config import TrainConfig
from trainer.runtime.distributed import SINGLE, DistContext
from trainer.runtime.lora import adapter_state, is_lora, merged_named_parameters, write_adapter
from trainer.runtime.run_meta import write_run_meta

STATE_FILE = "trainer_state.pt"
MERGED_DIR = "merged"  # a LoRA checkpoint's merged export (model.lora.export_merged)
FULL_BYTES = 2**20  # a write fails on a full disk with at most a few blocks left free


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


class DiskFullError(OSError):
    """A checkpoint, SFT resume point or metrics record did not fit on its disk; the message names the file or
    directory, the free space and what is kept (the checkpoint `--resume` continues from). errno is ENOSPC; str()
    is the message alone."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


def save_checkpoint(run_dir: str | Path, step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    optimizer: torch.optim.Optimizer, extra: dict[str, Any] | None = None, keep: int = 3,
                    run_config: TrainConfig | None = None, run_meta: dict[str, Any] | None = None,
                    ctx: DistContext = SINGLE) -> Path:
    """Write step `step` atomically (tmp dir + rename), update `latest`, keep the newest `keep`; `run_config` and
    `run_meta` (the dataset fingerprints, trainer/runtime/run_meta.py) are saved beside the weights. Under FSDP every rank
    calls it (module docstring)."""
    if ctx.fsdp:
        return _save_sharded(run_dir, step, model, tokenizer, optimizer, extra, keep, run_config, run_meta, ctx)
    root = checkpoint_dir(run_dir)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}"
    previous = latest_checkpoint(run_dir)
    kept = (f"the previous checkpoint {previous} is kept and --resume continues from it" if previous else
            "there is no earlier checkpoint to resume from")
    partial = [tmp]

    def remove_partial() -> None:
        for path in partial:
            shutil.rmtree(path, ignore_errors=True)
        (root / "latest.tmp").unlink(missing_ok=True)

    shutil.rmtree(tmp, ignore_errors=True)
    state = adapter_state(model) if is_lora(model) else None  # a LoRA policy's checkpoint: its adapters
    merged = merged_export(model, run_config)
    needed = tensor_bytes([state if state is not None else model.state_dict(), optimizer.state_dict(), merged])
    with disk_full_as_error(root, f"checkpoint {final}", needed, kept, remove_partial):
        write_policy(tmp, model, tokenizer, state, merged, run_config)
        if run_config is not None:
            write_run_config(tmp, run_config)
        if run_meta is not None:
            write_run_meta(tmp, run_meta)
        torch.save({"step": step, "optimizer": optimizer.state_dict(), "rng": _rng_state(), "extra": extra or {}},
                   tmp / STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        partial[:] = [final]  # complete now, but removed too if `latest` cannot be made to name it
        # Renamed over, not rewritten: truncating `latest` and then failing to write it would lose the resume point.
        (root / "latest.tmp").write_text(final.name + "\n")
        (root / "latest.tmp").replace(root / "latest")
        partial.clear()
    steps = sorted((p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1]))
    for old in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _save_sharded(run_dir: str | Path, step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  optimizer: torch.optim.Optimizer, extra: dict[str, Any] | None, keep: int,
                  run_config: TrainConfig | None, run_meta: dict[str, Any] | None, ctx: DistContext) -> Path:
    from trainer.runtime.checkpoint_sharded import full_model_state, save_shards

    root = checkpoint_dir(run_dir)
    final, tmp = root / f"step_{step}", root / f".tmp_step_{step}"
    if is_lora(model):  # collective: every rank gathers, rank 0 writes the export (a LoRA policy: its adapters)
        full = adapter_state(model)
    else:
        full = full_model_state(model)
        named = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
        full = {k: v for k, v in full.items() if k in named}  # tied weights once (the LM head tied to the embeddings)
    merged = merged_export(model, run_config)  # collective
    if ctx.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    ctx.barrier()
    save_shards(tmp, model, optimizer, ctx, _rng_state())  # collective
    ctx.barrier()
    if ctx.is_main:
        previous = latest_checkpoint(run_dir)
        kept = (f"the previous checkpoint {previous} is kept and --resume continues from it" if previous else
                "there is no earlier checkpoint to resume from")
        with disk_full_as_error(root, f"checkpoint {final}", tensor_bytes([full, merged]), kept,
                                lambda: shutil.rmtree(tmp, ignore_errors=True)):
            write_policy(tmp, model, tokenizer, full, merged, run_config)
            if run_config is not None:
                write_run_config(tmp, run_config)
            if run_meta is not None:
                write_run_meta(tmp, run_meta)
            torch.save({"step": step, "optimizer": None, "sharded": ctx.world_size, "rng": _rng_state(),
                        "extra": extra or {}}, tmp / STATE_FILE)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            (root / "latest.tmp").write_text(final.name + "\n")
            (root / "latest.tmp").replace(root / "latest")
        steps = sorted((p for p in root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name.split("_")[1]))
        for old in steps[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    ctx.barrier()
    return final


def merged_export(model: torch.nn.Module, run_config: TrainConfig | None) -> dict[str, torch.Tensor] | None:
    """A LoRA policy's merged weights on the CPU when `model.lora.export_merged` asks for them (collective under
    FSDP); None otherwise."""
    if not (is_lora(model) and run_config is not None and run_config.model.lora.export_merged):
        return None
    return {name: t.detach().to("cpu", copy=True) for name, t in merged_named_parameters(model)}


def write_policy(directory: Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                 state: dict[str, torch.Tensor] | None, merged: dict[str, torch.Tensor] | None,
                 run_config: TrainConfig | None) -> None:
    """The policy's loadable files in `directory`: a Hugging Face model, or a LoRA policy's adapters (peft's
    layout) and its `merged` export in `merged/`; the tokenizer beside them. `state`: the weights to write (FSDP's
    gathered state dict, a LoRA policy's adapters), None: the model's own."""
    directory.mkdir(parents=True, exist_ok=True)
    if is_lora(model):
        write_adapter(model, directory, state)
    else:
        model.save_pretrained(directory, **({"state_dict": state} if state is not None else {}))
    tokenizer.save_pretrained(directory)
    if merged is not None:  # the start model's class and config with the merged weights, run config beside them
        model.get_base_model().save_pretrained(directory / MERGED_DIR, state_dict=merged)
        tokenizer.save_pretrained(directory / MERGED_DIR)
        if run_config is not None:
            write_run_config(directory / MERGED_DIR, run_config)


def tensor_bytes(obj: Any) -> int:
    """Bytes of the distinct tensors in `obj` (nested dicts, lists, tuples): about what saving it writes."""
    seen: dict[int, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            seen[value.untyped_storage().data_ptr() if value.numel() else id(value)] = value.nbytes
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(obj)
    return sum(seen.values())


@contextmanager
def disk_full_as_error(directory: Path, what: str, needed: int, kept: str,
                       remove_partial: Callable[[], None]) -> Iterator[None]:
    """Turn a write failure of `what` into DiskFullError when the disk of `directory` is full.

    torch.save reports a full disk as RuntimeError ("enforce fail ... unexpected pos") and safetensors as its own
    error type, neither with an errno; so a failure also counts as a full disk when under FULL_BYTES were free
    when it happened, or when, once `remove_partial()` has freed the partial files, less than `needed` bytes are
    free. Any other failure propagates unchanged.
    """
    try:
        yield
    except DiskFullError:  # from a nested save, already explained
        raise
    except Exception as exc:
        existing = next(p for p in (directory, *directory.parents) if p.exists())  # (disk_usage needs one)
        full = shutil.disk_usage(existing).free < FULL_BYTES
        remove_partial()
        free = shutil.disk_usage(existing).free
        if not (full or free < needed or is_disk_full(exc)):
            raise
        raise DiskFullError(
            f"cannot write {what}: the disk is full ({_mb(free)} free in {directory}, about "
            f"{_mb(needed)} needed); free space or set output_dir=<a directory on a larger disk>; {kept}") from exc


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc` (or an exception it was raised from) reports a full disk or an exhausted quota."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc):  # safetensors: "I/O error: No space left on device (os error 28)"
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    marker = checkpoint_dir(run_dir) / "latest"
    if not marker.exists():
        return None
    path = checkpoint_dir(run_dir) / marker.read_text().strip()
    return path if (path / STATE_FILE).exists() else None


def load_trainer_state(path: str | Path, optimizer: torch.optim.Optimizer, model: torch.nn.Module | None = None,
                       ctx: DistContext = SINGLE) -> dict[str, Any]:
    """Restore optimizer and RNG states from a checkpoint dir (under FSDP: this rank's model and optimizer shards
    and RNG states); returns the saved state dict."""
    path = Path(path)
    state = torch.load(path / STATE_FILE, weights_only=False)
    sharded = state.get("sharded", 0)
    if bool(sharded) != ctx.fsdp:
        how = f"by {sharded} FSDP rank(s)" if sharded else "by one unsharded process"
        run = (f"torchrun --nproc-per-node {sharded} -m app.cli train ... --resume" if sharded else
               "alprl train ... --resume (no torchrun, distributed.fsdp=auto)")
        raise ConfigError(f"--resume: {path} was written {how}; resume it as it ran ({run}), or start a new run "
                         f"from its Hugging Face weights (model.path={path})")
    if sharded:
        from trainer.runtime.checkpoint_sharded import load_shards

        _set_rng_state(load_shards(path, model, optimizer, ctx))
        return state
    optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    return state


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
