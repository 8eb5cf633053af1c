"""The TRL side of bench/trl_peer.py: Hugging Face TRL's GRPOTrainer on an alprl recipe, in a process of its own.

    python bench/trl_peer_trl.py SPEC.json     # written by bench/trl_peer.py; the record goes to spec["record"]

`trl_mapping(cfg)` turns an alprl run config into `GRPOConfig` keywords, each with the alprl key it comes from, and
lists what TRL cannot be told (the parent prints both at the top of its report). It imports neither TRL nor torch,
so the parent can print the mapping before any run; an alprl setting the mapping does not cover raises ValueError
naming the key, rather than running a different algorithm under the same name.

`main` runs one seed: the dataset is alprl's own train draws, one row per GRPO group, in the order `alprl train`
plays them (`trainer/tasks.py` `episode_specs`); a row's prompt is the messages alprl's agent renders
(`agents/formats/tir_agent.py` SingleTurnMathAgent), which TRL passes through the same chat template. Before training
every row's prompt is tokenized by TRL's own `_tokenize_prompts` and compared with alprl's prompt ids; one
difference stops the run. The reward is alprl's env: `reset` on the row's task, `step` with the decoded reply,
the reward it returns (`envs/tir/single_turn.py`: math-verify on the last boxed answer). After training the
tasks of each generation are compared with alprl's draws for that step.

Clocks, behaviour unchanged: `TimedGRPOTrainer` times `_generate` (sampling and decoding) and
`_calculate_rewards` (the env's grading), which together are what alprl logs as `perf/rollout_s`; the old-policy
and reference log-prob forwards that `_generate_and_score_completions` also runs belong to the rest of the step,
as they do in alprl. `StepClock` stamps every optimizer step's begin and end (wall-clock epoch seconds, which the
parent compares with its launch time).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOSS_TYPES = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
"""alprl's loss aggregation → TRL's loss_type. bnpo divides by the tokens of the micro-batch, which is alprl's
token-mean over the mini-batch when one optimizer step is one forward (gradient_accumulation_steps=1); TRL's
default dapo divides by the mean tokens per step of the whole rollout batch instead."""
KL_TYPES = {"k3": False, "low_var_kl": False, "k3_is": True}
"""alprl's KL estimators TRL has → use_bias_correction_kl (TRL's KL is k3; k3_is multiplies it by π_θ/π_old)."""
COVERED = [("env.id", "alprl/Math-v0"), ("env.max_turns", 1), ("algo.policy_loss", "ppo_clip"),
           ("algo.upd_level", "token"), ("algo.advantage", "grpo"), ("algo.adv_leave_one_out", False),
           ("algo.kl_in_reward", False), ("algo.correction", "none"), ("algo.dynamic_sampling", False),
           ("algo.overlong_filter", False), ("algo.overlong_buffer", 0), ("algo.opsm_delta", None),
           ("algo.m2_threshold", None), ("algo.rollout_rs", ""), ("algo.quatro_delta", 0.0),
           ("algo.mipu_screen", False), ("perturb.enabled", False), ("rollout.policy_lag", 0),
           ("rollout.async_rollouts", False), ("rollout.sampler_quant", ""), ("rollout.quantization", "")]
"""alprl settings the mapping covers only at these values: anything else has no TRL counterpart here."""


@dataclass
class Mapping:
    """GRPOConfig keywords for an alprl config, where each came from, and what could not be matched."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, Any, str]] = field(default_factory=list)
    """(GRPOConfig key, value, the alprl key or reason it follows from), in the printed order."""
    unmatched: list[str] = field(default_factory=list)

    def set(self, key: str, value: Any, source: str) -> None:
        self.kwargs[key] = value
        self.rows.append((key, value, source))

    def lines(self, vllm: Mapping | None = None) -> list[str]:
        """The mapping as the report prints it; `vllm`: the vLLM variant's, whose own rows are added."""
        extra = [row for row in (vllm.rows if vllm else []) if row not in self.rows]
        return ([f"  {f'{key}={value!r}':<40} <- {source}" for key, value, source in self.rows]
                + [f"  {f'{key}={value!r}':<40} <- {source} (trl[vllm])" for key, value, source in extra]
                + ["not matched:"] + [f"  - {note}" for note in self.unmatched])


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def refuse_unmapped(cfg: Any) -> None:
    """Raise ValueError for a setting the mapping does not carry over (module docstring)."""
    for key, covered in COVERED:
        if _get(cfg, key) != covered:
            raise ValueError(f"{key}={_get(cfg, key)!r} has no TRL counterpart in this bench (it maps {key}="
                             f"{covered!r} only)")
    if cfg.algo.loss_agg not in LOSS_TYPES:
        raise ValueError(f"algo.loss_agg={cfg.algo.loss_agg!r} has no TRL loss_type; mapped: {', '.join(LOSS_TYPES)}")
    if cfg.algo.kl_coef and cfg.algo.kl_type not in KL_TYPES:
        raise ValueError(f"algo.kl_type={cfg.algo.kl_type!r}: TRL's KL is k3; mapped: {', '.join(KL_TYPES)}")
    batch, parts = cfg.rollout.prompts_per_step * cfg.rollout.group_size, cfg.optim.num_minibatches
    if batch % parts:
        raise ValueError(f"a rollout batch of {batch} rows does not split into optim.num_minibatches={parts} equal "
                         f"mini-batches, which TRL's steps_per_generation needs")


def trl_mapping(cfg: Any, *, steps: int, vllm: bool) -> Mapping:
    """The GRPOConfig keywords that run `cfg` (an alprl TrainConfig) for `steps` RL steps (module docstring)."""
    refuse_unmapped(cfg)
    r, a, o, m = cfg.rollout, cfg.algo, cfg.optim, Mapping()
    rows_per_step = r.prompts_per_step * r.group_size // o.num_minibatches
    m.set("num_generations", r.group_size, "rollout.group_size")
    m.set("per_device_train_batch_size", rows_per_step, "prompts_per_step × group_size / optim.num_minibatches")
    m.set("gradient_accumulation_steps", 1, "one forward per optimizer step keeps token-mean exact (loss_type)")
    m.set("steps_per_generation", o.num_minibatches, "optim.num_minibatches: optimizer steps per rollout batch")
    m.set("num_iterations", 1, "each rollout batch is trained on once")
    m.set("max_steps", steps * o.num_minibatches, "steps × optim.num_minibatches")
    m.set("max_completion_length", min(r.max_new_tokens, r.max_response_tokens),
          "rollout.max_new_tokens (one turn is the whole reply)")
    m.set("mask_truncated_completions", False, "a reply cut at the budget is graded and trained on, as in alprl")
    for key in ("temperature", "top_p", "top_k"):
        m.set(key, getattr(r, key), f"rollout.{key}")
    m.set("beta", a.kl_coef, "algo.kl_coef (a loss term to the frozen start in both)")
    m.set("use_bias_correction_kl", KL_TYPES.get(a.kl_type, False), f"algo.kl_type={a.kl_type}")
    m.set("epsilon", a.clip_low, "algo.clip_low")
    m.set("epsilon_high", a.clip_high, "algo.clip_high")
    m.set("delta", a.clip_dual, "algo.clip_dual: for A<0 TRL's cap min(r, δ) is the dual clip; for A>0 "
          "the clip at 1+ε_high < δ binds first")
    m.set("importance_sampling_level", "token", "algo.upd_level=token")
    m.set("loss_type", LOSS_TYPES[a.loss_agg], f"algo.loss_agg={a.loss_agg}")
    m.set("scale_rewards", "group" if a.adv_norm_by_std else "none", f"algo.adv_norm_by_std={a.adv_norm_by_std}")
    m.set("entropy_coef", a.entropy_coef, "algo.entropy_coef")
    m.set("learning_rate", o.lr, "optim.lr")
    m.set("adam_beta1", o.betas[0], "optim.betas[0]")
    m.set("adam_beta2", o.betas[1], "optim.betas[1]")
    m.set("weight_decay", o.weight_decay, "optim.weight_decay")
    m.set("max_grad_norm", o.grad_clip, "optim.grad_clip")
    m.set("optim", "adamw_torch", "torch.optim.AdamW, as alprl")
    m.set("lr_scheduler_type", "constant", "alprl has no schedule")
    m.set("warmup_steps", 0, "alprl has no warm-up")
    m.set("seed", cfg.seed, "seed")
    m.set("shuffle_dataset", False, "the rows are alprl's draws, in its order")
    m.set("bf16", False, "the trainer in fp32, as alprl's (GRPOConfig's default is bf16)")
    m.set("gradient_checkpointing", False, "alprl checkpoints only under FSDP (GRPOConfig's default is on)")
    m.set("use_vllm", vllm, "trl[hf]: HF generate; trl[vllm]: vLLM")
    if vllm:
        m.set("vllm_mode", "colocate", "vLLM in the trainer's process, as alprl's engine beside its trainer")
        m.set("vllm_importance_sampling_correction", False, "algo.correction=none")
    m.unmatched = unmatched_notes(cfg, rows_per_step)
    return m


def unmatched_notes(cfg: Any, rows_per_step: int) -> list[str]:
    """What the two trainers still do differently under the mapping, one line each."""
    r, o = cfg.rollout, cfg.optim
    notes = [f"sampler precision: alprl samples with a rollout.dtype={r.dtype} copy of the policy; TRL's HF generate "
             "with the fp32 training model itself, its vLLM colocate in the checkpoint's own dtype (no setting for "
             "either)",
             "advantage: (R - mean) / (std + eps), unbiased std, in both; eps is 1e-6 in alprl, 1e-4 in TRL (fixed "
             "in its code)",
             "sampling seeds: alprl seeds each episode from (seed, episode); TRL draws from the global torch RNG: "
             "the same seed gives each trainer its own samples",
             "mini-batches: both shuffle a rollout batch's rows once and split them, with different permutations",
             "step timing: generation is alprl's perf/rollout_s (sampling, env steps that grade) and TRL's _generate "
             "+ _calculate_rewards; old-policy and reference log-probs fall in the rest of the step in both",
             "end of run: alprl saves a resumable checkpoint (weights, optimizer state); TRL saves the model",
             "a non-finite grad norm: alprl skips the step, TRL's Trainer steps"]
    if cfg.algo.kl_coef:
        notes.append("k3 KL: alprl clamps each token's value to [-10, 10], TRL does not (only far from the start)")
    if o.micro_batch_size < rows_per_step:
        notes.append(f"micro-batches: alprl runs a mini-batch as micro-batches of {o.micro_batch_size} rows, TRL "
                     f"as one forward of {rows_per_step} (accumulation would change bnpo's denominator): "
                     f"memory differs for that reason too")
    if cfg.diagnostics.every:
        notes.append(f"diagnostics: alprl's extra no-grad forwards run at step 1, every {cfg.diagnostics.every} "
                     f"and the last step (diagnostics.every=0: off); TRL computes entropies in every loss forward")
    return notes


# ------------------------------------------------------------------------------------------------- the run


def task_rows(cfg: Any, steps: int, tokenizer: Any) -> tuple[list[dict], list[list[int]]]:
    """One dataset row per GRPO group of steps 1..steps, in alprl's order, and alprl's prompt ids for each."""
    from agents.env_families import make_agent, make_env
    from trainer.tasks import episode_specs

    agent, env = make_agent(cfg.env, tokenizer), make_env(cfg.env)
    rows, ids = [], []
    for step in range(1, steps + 1):
        specs = episode_specs(cfg, "train", step, cfg.rollout.prompts_per_step, cfg.rollout.group_size)
        for spec in specs[:: cfg.rollout.group_size]:  # TRL repeats each row num_generations times
            obs, info = env.reset(seed=spec.seed, options=spec.options)
            rows.append({"prompt": agent.messages(obs), "task_index": spec.options["index"],
                         "task_seed": spec.seed, "step": step})
            ids.append(agent.prompt_ids(obs, info))
    env.close()
    return rows, ids


def env_reward(cfg: Any):
    """TRL reward function: the reward alprl's env gives the decoded reply on the row's task."""
    from agents.env_families import make_env

    env = make_env(cfg.env)

    def alprl_env_reward(completions: list, task_index: list[int], task_seed: list[int], **_: Any) -> list[float]:
        rewards = []
        for completion, index, seed in zip(completions, task_index, task_seed, strict=True):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            env.reset(seed=seed, options={"split": "train", "index": index})
            rewards.append(float(env.step(text)[1]))
        return rewards

    return alprl_env_reward


def timed_trainer_class():
    """GRPOTrainer with clocks around sampling and scoring (module docstring); TRL imported here."""
    import torch
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, **kwargs) -> None:
            self.generations: list[dict] = []  # one entry per rollout batch
            super().__init__(*args, **kwargs)

        def _generate_and_score_completions(self, inputs):
            self.generations.append({"tasks": [x["task_index"] for x in inputs[:: self.num_generations]],
                                     "generate_s": 0.0, "reward_s": 0.0, "tokens": 0, "reward_mean": None})
            start = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            self.generations[-1]["total_s"] = time.perf_counter() - start
            return out

        def _generate(self, prompts):
            start = time.perf_counter()
            out = super()._generate(prompts)
            entry = self.generations[-1]
            entry["generate_s"] += time.perf_counter() - start
            entry["tokens"] += sum(len(ids) for ids in out[1])  # completion ids, eos included as alprl counts it
            return out

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            start = time.perf_counter()
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            entry = self.generations[-1]
            entry["reward_s"] += time.perf_counter() - start
            entry["reward_mean"] = float(torch.nanmean(rewards.float()))
            return rewards

    return TimedGRPOTrainer


def step_clock():
    """A TrainerCallback stamping each optimizer step's begin and end (epoch seconds)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.begins: list[float] = []
            self.ends: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begins.append(time.time())

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.time())

    return StepClock()


def check_prompts(trainer: Any, rows: list[dict], expected: list[list[int]]) -> int:
    """Tokenize every row's prompt as TRL's `_generate` does and require alprl's ids; returns the rows checked."""
    got = trainer._tokenize_prompts([row["prompt"] for row in rows])[0]
    for i, (theirs, ours) in enumerate(zip(got, expected, strict=True)):
        theirs = list(theirs)
        if theirs != ours:
            pairs = enumerate(zip(theirs, ours, strict=False))
            at = next((k for k, (x, y) in pairs if x != y), min(len(theirs), len(ours)))  # or where one ends
            raise SystemExit(f"trl_peer: TRL's prompt ids differ from alprl's: row {i} (step {rows[i]['step']}, task "
                             f"{rows[i]['task_index']}) at token {at}: TRL {theirs[at:at + 5]} vs alprl "
                             f"{ours[at:at + 5]} ({len(theirs)} vs {len(ours)} tokens)")
    return len(rows)


def check_order(generations: list[dict], rows: list[dict], steps: int) -> int:
    """Each TRL generation played alprl's tasks of the same step, in the same order; returns the steps checked."""
    for step in range(1, steps + 1):
        want = [row["task_index"] for row in rows if row["step"] == step]
        got = generations[step - 1]["tasks"] if step <= len(generations) else None
        if got != want:
            raise SystemExit(f"trl_peer: TRL's generation {step} played tasks {got}, alprl's step {step} plays {want}")
    return steps


def rl_steps(begins: list[float], ends: list[float], generations: list[dict], per_step: int) -> list[dict]:
    """Per RL step: wall from its first optimizer step's begin to its last one's end, generation seconds, sampled
    tokens, mean reward."""
    return [{"wall_s": ends[k * per_step + per_step - 1] - begins[k * per_step], "tokens": g["tokens"],
             "gen_s": g["generate_s"] + g["reward_s"], "reward": g["reward_mean"]} for k, g in enumerate(generations)]


def train(spec: dict) -> dict:
    """One TRL run of `spec` (bench/trl_peer.py writes it); returns the record."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig

    from agents.models import load_tokenizer
    from trainer.setup.build import build_config

    cfg = build_config(spec["config"], spec["overrides"])
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    mapping = trl_mapping(cfg, steps=spec["steps"], vllm=spec["vllm"])
    tokenizer = load_tokenizer(spec["model"])  # alprl's loader: tokenizer.json verbatim, as alprl trains with it
    rows, expected = task_rows(cfg, spec["steps"], tokenizer)
    use_cpu = not torch.cuda.is_available()
    args = GRPOConfig(output_dir=spec["out_dir"], report_to="none", save_strategy="no", logging_strategy="no",
                      disable_tqdm=True, log_level="warning", use_cpu=use_cpu, dataloader_num_workers=0,
                      remove_unused_columns=False, model_init_kwargs={"dtype": "float32"}, **mapping.kwargs)
    clock = step_clock()
    trainer = timed_trainer_class()(model=spec["model"], reward_funcs=env_reward(cfg), args=args,
                                    train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                    callbacks=[clock])
    trainer.remove_callback(PrinterCallback)
    prompts_checked = check_prompts(trainer, rows, expected)
    trainer.train()
    final = Path(spec["out_dir"]) / "final"
    trainer.save_model(str(final))
    return {"status": "ok", "device": "cpu" if use_cpu else "cuda", "prompts_checked": prompts_checked,
            "order_checked": check_order(trainer.generations, rows, spec["steps"]), "final_model": str(final),
            "first_step_begin": clock.begins[0], "generations": trainer.generations,
            "rl_steps": rl_steps(clock.begins, clock.ends, trainer.generations, cfg.optim.num_minibatches)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python bench/trl_peer_trl.py SPEC.json (written by bench/trl_peer.py)", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    record = train(spec)
    Path(spec["record"]).write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
