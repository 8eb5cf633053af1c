"""The rollout section of the run config (`rollout.*`): the sampler, its budgets, its mismatch knobs and how
episodes are scheduled. Part of the config tree of trainer/config/train_config.py, one dataclass a concern."""

from __future__ import annotations

from dataclasses import dataclass, field

INFRA_FAILURE_POLICIES = ("exclude", "resample", "zero")
"""What `rollout.infra_failures` may be; agents/rollout.py marks the episodes, trainer/objective/infra_failures.py
acts on it."""

ROLLOUT_SOURCES = ("native", "harness")
"""What `rollout.source` may be: agents/rollout.py's own agent loop, or a user's harness through the policy endpoint
(agents/endpoint/harness.py)."""


@dataclass
class RolloutConfig:
    source: str = "native"
    """Where a step's trajectories come from: native (alprl's agent loop, agents/rollout.py) | harness (the async
    function `env.harness` names plays each episode through alprl's OpenAI-compatible policy endpoint, which records
    the engine's token ids and log-probs; docs/policy_endpoint.md)."""
    harness_concurrency: int = 0
    """rollout.source=harness: episodes whose harness runs at once (0: all of the step's)."""
    engine: str = "auto"
    """Rollout engine: auto | vllm | hf (transformers, KV-cached batched sampling). auto is vllm where it imports,
    except without CUDA for a model of at most 50M parameters (agents/engines/__init__.py `auto_engine`: there the
    transformers engine steps and starts faster); the run prints its choice."""
    schedule: str = "auto"
    """Episode scheduling: auto | overlapped (each episode advances on its own while others wait for env steps;
    vllm only) | turn_by_turn (all episodes generate, then all step). auto: overlapped on a GPU sampler, turn by
    turn where sampler and envs share the CPU (see agents/rollout.py)."""
    dtype: str = "bfloat16"
    """Sampler dtype. bf16 vs the fp32 trainer creates the rollout/training mismatch on purpose."""
    temperature: float = 1.0
    """Sampling temperature; the trainer computes log-probs on logits / temperature."""
    top_p: float = 1.0
    """Nucleus sampling: the sampler keeps the smallest set of tokens with probability mass ≥ top_p. The trainer
    replays the same truncation on its own logits (trainer/objective/logprobs.py), so its log-probs are of the
    distribution the sampler sampled from and every ratio is 1 when the weights agree."""
    top_k: int = 0
    """Top-k sampling: the sampler keeps the k most probable tokens (0: all). Replayed by the trainer like top_p."""
    max_new_tokens: int = 64
    """Token budget of one assistant turn."""
    max_response_tokens: int = 256
    """Total response budget (assistant + observation tokens); exceeding it truncates the episode. The model's
    context must hold it plus the prompt (`alprl sft` sizes the tiny model's; a full context also truncates)."""
    max_obs_tokens: int = 64
    """Observation tokens appended per tool call (cut on token ids)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """More token ids that end an assistant turn (finish reason eos: the episode ends there), on top of the
    tokenizer's eos and its chat template's end-of-turn token, which every turn stops on already
    (agents/control_tokens.py). Both engines stop on the same ids."""
    episode_timeout_s: float = 0.0
    """Wall-clock limit of one episode, checked between turns (0: none); past it: truncated, reward 0."""
    infra_failures: str = "exclude"
    """Episodes whose outcome is not the policy's (a tool call the sandbox could not run after its retries, an
    engine error, a context overflow a tool caused, an environment timeout): exclude (out of the loss and of their
    group's advantage statistics; a group left with fewer than two valid members contributes nothing) | resample
    (sample the task again, up to the group's size, then exclude what still fails) | zero (keep them as reward 0
    in their group, as most trainers do: a fake zero that shifts every other member's advantage). Counted per step
    in rollout/infra_excluded."""
    max_infra_frac: float = 0.5
    """The share of a step's episodes the infrastructure may fail (`rollout/infra_frac`: the sandbox, the engine,
    the harness, the timeout, a context the policy did not fill) before the step is an outage: one warning line
    naming the kinds and counts, `rollout/infra_over_bound` = 1 in its metrics (the run report marks it), and one
    step toward rollout.infra_patience. Past half, the update rests on fewer episodes than were lost.
    0: any infrastructure failure counts; 1: none does (trainer/runtime/outage.py)."""
    infra_patience: int = 3
    """Stop the run after this many consecutive steps over rollout.max_infra_frac: the last step's checkpoint is
    saved and `alprl train` exits with status 4, so `--resume` continues once the service is back. One bad step
    is a restart or a slow moment; three in a row is an outage. 0: never stop (the warnings still print)."""
    env_concurrency: int = 8
    """Threads stepping envs at once: bounds the concurrent requests toward the sandbox."""
    prompts_per_step: int = 16
    """Distinct tasks per rollout batch."""
    group_size: int = 8
    """Samples per task (GRPO group size G)."""
    gpu_memory_utilization: float = 0.5
    """vLLM on GPU: share of GPU memory for sampler weights + KV cache (the trainer needs the rest)."""
    tensor_parallel_size: int = 1
    """vLLM: GPUs per rollout engine (tensor parallelism)."""
    quantization: str = ""
    """vLLM's own sampler weight quantization (real quantized kernels), a mismatch knob: empty (none) | fp8 (GPU
    only). For fake quantization on any engine and machine see sampler_quant."""
    sampler_quant: str = ""
    """Fake quantization of the weights the trainer pushes into the sampler, a mismatch knob on any engine and
    machine: empty (none) | int8 | int4 (any of int2..int8) | fp8 (= fp8_e4m3) | fp8_e5m2. Round-to-nearest,
    symmetric, of every nn.Linear weight in the decoder layers (the robustness evaluator's quantizers), at the
    engine's first load and every sync; the trainer keeps full precision (trainer/runtime/sampler_mismatch.py). Unlike
    `quantization`, the sampler computes in rollout.dtype; the two compose."""
    sampler_quant_group: int = 0
    """rollout.sampler_quant's group size: one scale per this many inputs of a weight row (e.g. 32, 128); 0: one
    scale per output channel."""
    policy_lag: int = 0
    """Policy lag k, a staleness knob: the rollouts of step s are sampled with the weights after step s − 1 − k
    (the start weights while s ≤ k), as asynchronous trainers produce; the trainer's θ_old stays current. Costs
    k + 1 CPU copies of the weights; a resume restarts the lag from the checkpoint's weights. 0: on-policy
    sampler. Needs algo.mipu_screen=false."""
    async_rollouts: bool = False
    """Overlap the next steps' rollouts with the current update (a background thread samples ahead;
    trainer/runtime/async_rollouts.py). The schedule is fixed, not timed: batch s is sampled with the weights after update
    max(0, s − 1 − a), a = max_staleness (wait) or async_prefetch (drop), so runs and resumes are reproducible.
    Each sample's lag is `info["policy_lag"]`, logged as rollout/policy_lag_mean and _max. Needs policy_lag=0
    (two ways of producing lag), algo.mipu_screen=false, enable_sleep_mode=false and one process (data-parallel
    async rollouts are not supported)."""
    max_staleness: int = 1
    """The bound on the policy lag, in updates, of every sample used under async_rollouts; >= 1."""
    staleness_policy: str = "wait"
    """What bounds the lag under async_rollouts: wait (the producer never samples more than max_staleness updates
    ahead, so no sample exceeds the bound) | drop (the producer samples up to async_prefetch batches ahead; a batch
    whose lag at use exceeds max_staleness is dropped, counted in rollout/async_dropped, and replaced by a fresh
    rollout sampled with the current weights, lag 0)."""
    max_token_version_gap: int = 0
    """Sampled tokens more than this many policy versions older than the trainer's leave the loss (0: no bound;
    AReaL's max_token_version_gap); `stale_token_policy` says how. Each token records its version
    (trainer/algorithms/staleness.py)."""
    stale_token_policy: str = "mask"
    """mask (only the stale tokens leave the loss) | drop_episode (an episode with one leaves it whole)."""
    async_prefetch: int = 0
    """Batches the producer samples ahead under staleness_policy=drop; 0: max_staleness (then nothing is
    dropped). Unused under wait."""
    kv_cache_dtype: str = "auto"
    """vLLM KV-cache dtype, a mismatch knob: auto (= dtype) | fp8 (GPU)."""
    max_model_len: int = 0
    """vLLM context length (prompt + response tokens); 0: the model config's `max_position_embeddings`, which the
    transformers engine always uses."""
    logprobs_topk: int = 0
    """Log-probs of the sampler's k most probable tokens at every sampled position (vLLM's SamplingParams(logprobs=k),
    the transformers engine's own top-k), from which the trainer logs `rollout_corr/full_vocab_kl`, the
    sampler-vs-trainer KL over the whole vocabulary with the rest lumped into a tail bucket
    (trainer/diagnostics/full_vocab_kl.py). 0: off. vLLM refuses k above its max_logprobs (20 unless started with
    more). bench/forensics_cost.py measures its cost per step."""
    verify_weight_sync: bool = True
    """After every weight push, compare a checksum of each tensor as pushed with what the engine holds after loading
    it (both engines; vLLM with one worker and no `quantization`) and stop the run naming the first tensor that
    differs (agents/engines/weight_check.py); logged as rollout/weight_sync_ok. bench/forensics_cost.py measures
    its cost per step."""
    enable_sleep_mode: bool = False
    """vLLM on GPU: free sampler weights + KV cache while the trainer updates (no effect on CPU)."""


def engine_options(r: RolloutConfig) -> dict:
    """The vLLM engine's options from the rollout config (`make_engine`'s keywords; the transformers engine ignores
    them)."""
    return {"gpu_memory_utilization": r.gpu_memory_utilization, "tensor_parallel_size": r.tensor_parallel_size,
            "quantization": r.quantization or None, "kv_cache_dtype": r.kv_cache_dtype,
            "max_model_len": r.max_model_len or None, "enable_sleep_mode": r.enable_sleep_mode}
