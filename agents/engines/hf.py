"""Transformers rollout engine: batched KV-cached sampling in a configurable rollout dtype.

The engine keeps its own copy of the policy in `dtype` (bf16 by default) while the trainer keeps fp32,
so sampler and trainer disagree a little, as vLLM and FSDP do. `update_weights` copies the trainer's
weights in (cast to the rollout dtype). Log-probs are those of the distribution actually sampled from:
fp32 log-softmax of logits / temperature after top-k, then top-p (vLLM's order and boundary rule,
agents/engines/sampling.py, which the trainer replays).

Legend: N requests in a batch, P padded prompt width, V vocabulary.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable
from concurrent.futures import Future

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from agents.engines.base import GenerationRequest, GenerationResult, Seed
from agents.engines.sampling import truncate_logits
from agents.engines.weight_check import Checksum, checksum, verify

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}


def resolve_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}") from None


def checkpoint_eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The eos ids vLLM stops on for a checkpoint: the tokenizer's eos and the generation config's (an int or a
    list: Qwen2.5-Instruct lists `<|im_end|>` and `<|endoftext|>`), so both engines end turns on the same ids."""
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    listed = config_eos if isinstance(config_eos, list | tuple) else [config_eos]
    return list(dict.fromkeys(int(e) for e in [tokenizer.eos_token_id, *listed] if e is not None))


def batch_seed(seed: int | None) -> int:
    """One generator seed for a batched call seeded by one int (a fresh random one when unseeded)."""
    if seed is None:
        return torch.seed() % (2**63)
    return int(seed) % (2**63)


class HFEngine:
    """Batched sampler over a causal LM; one instance per run, weights refreshed by the trainer.

    dtype, temperature, top_p, top_k: the sampler, the run config's `rollout.*` (without defaults here, the config
    states them once); truncation as agents/engines/sampling.py states it."""

    concurrent_callers = False  # each call is its own batched generation: the rollout schedules turn by turn
    overlap_episodes = False

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, dtype: str,
                 temperature: float, top_p: float, top_k: int, eos_token_ids: list[int] | None = None,
                 verify_sync: bool = False, logprobs_topk: int = 0):
        self.model = copy.deepcopy(model).to(resolve_dtype(dtype)).eval()
        self.model.requires_grad_(False)
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p, self.top_k = top_p, top_k
        eos = eos_token_ids if eos_token_ids is not None else checkpoint_eos_ids(model, tokenizer)
        self.eos_token_ids = [e for e in eos if e is not None]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        # The model's context, as vLLM derives it: both engines cut a request at the same length.
        self.max_model_len = int(getattr(model.config, "max_position_embeddings", 0) or 2**31)
        self.weight_version = 0  # the trainer sets it at every push (trainer/components.py)
        # transformers ≥ 5.2x names the KV-cache argument `cache`; older releases `past_key_values`.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.verify_sync = verify_sync  # update_weights compares checksums (agents/engines/weight_check.py)
        self.logprobs_topk = logprobs_topk  # > 0: each result also holds every position's top-k log-probs

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy the trainer's tensors in, cast to the rollout dtype; with `verify_sync`, then compare each one's
        checksum as pushed with the parameter's after the copy (`WeightSyncError` names the first that differs)."""
        params = dict(self.model.named_parameters())
        sums: dict[str, Checksum] = {}
        for name, tensor in named_tensors:
            if name not in params:
                raise KeyError(f"update_weights: engine model has no parameter {name!r}")
            pushed = tensor.detach().to(params[name].dtype)
            if self.verify_sync:
                sums[name] = checksum(pushed)
            self._load(params[name], pushed)
        if self.verify_sync:
            verify(sums, {name: [("param", checksum(params[name]))] for name in sums}, "the transformers engine")

    @staticmethod
    def _load(param: torch.nn.Parameter, tensor: torch.Tensor) -> None:
        param.copy_(tensor)

    def load_adapter(self, path: str) -> None:
        """The Engine protocol's adapter sync, which this engine refuses by design: a LoRA policy reaches it as merged
        weights (`update_weights`), and `model.lora.sync=adapter` with it is refused before a run starts
        (trainer/runtime/lora.py `choose_sync`); this is the guard for a caller outside the trainer."""
        raise ValueError(f"load_adapter({path!r}): the transformers engine takes a LoRA policy as merged weights "
                         "(model.lora.sync=merged); vLLM serves adapters (rollout.engine=vllm)")

    def _prefill_inputs(self, requests: list[GenerationRequest]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)  # (N, P) left-padded
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids):] = 1
        return ids, mask

    def _sample(self, logits: torch.Tensor, greedy: bool, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """logits: (N, V), `uniform`: (N,) in [0, 1) → sampled ids (N,) and their log-probs (N,) under the sampling
        distribution (and, with `logprobs_topk`, `self._top` its k most probable per row). Inverse-CDF sampling:
        row i takes the first token whose cumulative probability exceeds uniform[i], so one vectorized call serves
        rows with their own generators."""
        scaled = truncate_logits(logits.float() / self.temperature, top_p=self.top_p, top_k=self.top_k)
        logprobs = scaled.log_softmax(-1)  # (N, V)
        if self.logprobs_topk:  # (N, k) ids and log-probs, as lists once per step (a row's .tolist() each costs more)
            top = logprobs.topk(min(self.logprobs_topk, logprobs.shape[-1]), dim=-1)
            self._top = (top.indices.tolist(), top.values.tolist())
        if greedy:
            tokens = logprobs.argmax(-1)
        else:
            cdf = logprobs.exp().cumsum(-1)  # (N, V)
            total = cdf[:, -1:]
            # strictly below the total, so a token is always found; `right`: never a zero-probability token
            target = torch.minimum(uniform[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
            tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)

    @staticmethod
    def _uniforms(n: int, steps: int, seed: Seed) -> torch.Tensor:
        """(N, S) uniforms for N requests' S sampling steps: from each request's own generator for a per-request
        seed list (a request then samples the same tokens whatever else is in the batch, as with vLLM), else
        from one generator for the batch."""
        if isinstance(seed, list | tuple):
            return torch.stack([torch.rand(steps, generator=torch.Generator().manual_seed(int(s) % (2**63)))
                                for s in seed]) if n else torch.zeros((0, steps))
        return torch.rand((n, steps), generator=torch.Generator().manual_seed(batch_seed(seed)))

    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest], *, greedy: bool = False,
                 seed: Seed = None) -> list[GenerationResult]:
        """One batched call. A per-request seed list gives each request its own generator, as vLLM does, so a
        request samples the same tokens whatever else is in the batch (data-parallel ranks split a step's episodes
        and must sample what one process would); one int seeds one generator for the batch. Rows that finish
        leave the batch (and the KV cache) once they are a quarter of it, so short replies stop costing compute."""
        budgets = [min(r.max_new_tokens, self.max_model_len - len(r.prompt_ids)) for r in requests]
        if not requests or max(budgets) <= 0:
            return [GenerationResult([], [], "length") for _ in requests]
        n, steps = len(requests), max(budgets)
        uniform = self._uniforms(n, steps, seed)  # (N, S)
        ids, attn = self._prefill_inputs(requests)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)  # (N, P)
        cache = DynamicCache()
        logits = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True,
                            logits_to_keep=1, **{self._cache_kw: cache}).logits[:, -1, :]  # (N, V)
        results = [GenerationResult([], [], "length") for _ in requests]
        done = [b <= 0 for b in budgets]
        texts = [""] * n
        rows = list(range(n))  # the request behind each row of the batch
        last_pos = positions[:, -1]  # (n_rows,)
        for t in range(steps):
            tokens, logps = self._sample(logits, greedy, uniform[rows, t])
            for row, i in enumerate(rows):
                if done[i]:
                    continue
                tok = int(tokens[row])
                results[i].token_ids.append(tok)
                results[i].logprobs.append(float(logps[row]))
                if self.logprobs_topk:
                    self._append_top(results[i], row)
                done[i] = self._finished(requests[i], budgets[i], results[i], tok, texts, i)
            finished = [row for row, i in enumerate(rows) if done[i]]
            if len(finished) == len(rows):
                break
            if 4 * len(finished) >= len(rows):  # drop finished rows from the batch and the cache
                keep = torch.tensor([row for row, i in enumerate(rows) if not done[i]])
                rows = [rows[row] for row in keep.tolist()]
                cache.reorder_cache(keep)
                tokens, attn, last_pos = tokens[keep], attn[keep], last_pos[keep]
            else:  # a finished row still in the batch feeds padding
                tokens = torch.where(torch.tensor([done[i] for i in rows]), torch.full_like(tokens, self.pad_id),
                                     tokens)
            attn = torch.cat([attn, torch.ones((len(rows), 1), dtype=attn.dtype)], dim=-1)
            last_pos = last_pos + 1
            logits = self.model(input_ids=tokens[:, None], attention_mask=attn, position_ids=last_pos[:, None],
                                use_cache=True, **{self._cache_kw: cache}).logits[:, -1, :]  # the cache grows in place
        return results

    def _append_top(self, result: GenerationResult, row: int) -> None:
        """Row `row`'s top-k of this step (`_sample`), the tokens the sampler keeps only, onto `result.topk`."""
        ids, values = self._top[0][row], self._top[1][row]
        if result.topk is None:
            result.topk = []
        kept = [j for j, v in enumerate(values) if v != float("-inf")]
        result.topk.append(([ids[j] for j in kept], [values[j] for j in kept]))

    def submit(self, requests: list[GenerationRequest], *, greedy: bool = False,
               seed: Seed = None) -> list[Future[GenerationResult]]:
        """`generate` in the caller's thread, its results handed back as resolved futures (the `Engine` protocol's
        one entry point for the rollout). The batch finishes as a whole, so all futures resolve together; a
        failed generation fails every future of the call."""
        futures: list[Future[GenerationResult]] = [Future() for _ in requests]
        try:
            results = self.generate(requests, greedy=greedy, seed=seed)
        except Exception as err:
            for future in futures:
                future.set_exception(err)
            return futures
        for future, result in zip(futures, results, strict=True):
            future.set_result(result)
        return futures

    def sleep(self) -> None:
        """No-op: this fallback sampler keeps its copy of the policy where the trainer's model is and does not
        offload it (vLLM's engine does, on a GPU)."""

    def wake_up(self) -> None:
        """No-op (see `sleep`)."""

    def close(self) -> None:
        """No-op: the engine owns no thread or process; its model is freed with the engine."""

    def _finished(self, req: GenerationRequest, budget: int, res: GenerationResult, tok: int, texts: list[str],
                  i: int) -> bool:
        if tok in self.eos_token_ids or tok in req.stop_token_ids:
            res.finish_reason = "eos"
            return True
        if req.stop_strings:
            # Decode only the new piece; a stop string may span token boundaries, so search the tail.
            texts[i] += self.tokenizer.decode([tok], skip_special_tokens=False)
            tail = texts[i][-(max(len(s) for s in req.stop_strings) + 16):]
            if any(s in tail for s in req.stop_strings):
                res.finish_reason = "stop"
                return True
        if len(res.token_ids) >= budget:
            res.finish_reason = "length"
            return True
        return False
