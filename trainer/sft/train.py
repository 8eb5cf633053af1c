"""SFT warm start: a scripted (imperfect) expert plays TIR episodes; the tiny model imitates them.

Pipeline: expert turns are played through the real env (real sandbox) so observations are exactly what
RL will show → a tokenizer is trained on that corpus → the tiny Qwen2 model is built → trained with
cross-entropy on the assistant tokens only (observation tokens masked, as in RL) → saved in HF format. The loss
and learning rate of every optimizer step go to `metrics.jsonl` and `tensorboard/` beside the model (as a run's).
With `model.path` set, the checkpoint there is fine-tuned instead of the tiny model, with its own tokenizer and
chat template (`trainer/sft/base.py`). The expert is imperfect on purpose (`p_skip_tool` guesses without the
tool, `p_wrong_copy` miscopies the result), so the SFT policy has headroom that RL can recover.

Token streams are built exactly like rollouts: each turn and each observation tokenized separately and
concatenated, each observation cut at `rollout.max_obs_tokens`, then the eos token; so the SFT model sees the same
boundaries and the same observations it will act on. Expert episodes longer than `rollout.max_response_tokens`
are kept whole for SFT, but a warning names the share RL and evaluation will cut before they can finish.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from agents.env_families import env_entry, expert_player, make_agent, make_env
from agents.experts import ExpertEpisode
from agents.models import build_tiny_model, save_pretrained, train_tokenizer
from agents.rollout import Agent, capped_observation_ids
from agents.templates.history import HistoryPolicy, HistoryRules
from agents.trajectory import Trajectory
from envs.splits import derive_seed
from trainer.config.errors import ConfigError
from trainer.config.run_config import write_run_config
from trainer.config.train_config import TrainConfig
from trainer.runtime.checkpoint import disk_full_as_error, tensor_bytes
from trainer.runtime.logger import MetricLogger
from trainer.runtime.progress import progress_bar
from trainer.sft import base as sft_base
from trainer.sft import resume as sft_resume
from trainer.sft.cache import META_FILE, sft_fingerprint, sft_inputs
from trainer.tasks import rollout_limits

OVER_BUDGET_WARN_FRAC = 0.02  # warn when more expert episodes than this exceed the RL response budget
log = logging.getLogger(__name__)


def episode_tokens(agent: Agent, ep: ExpertEpisode, eos_id: int,
                   max_obs_tokens: int | None = None) -> tuple[list[int], list[int]]:
    """(input ids, loss mask) of one expert episode, built like a rollout (observations cut at `max_obs_tokens`)."""
    ids = agent.prompt_ids(ep.question, {})
    mask = [0] * len(ids)
    for i, turn in enumerate(ep.turns):
        turn_ids = agent.turn_ids(turn)
        ids += turn_ids
        mask += [1] * len(turn_ids)
        if i < len(ep.observations):
            obs = ep.observations[i]
            obs_ids = agent.observation_ids(obs) if max_obs_tokens is None else \
                capped_observation_ids(agent, obs, max_obs_tokens)
            ids += obs_ids
            mask += [0] * len(obs_ids)
    return ids + [eos_id], mask + [1]


def episode_sequences(agent: Agent, ep: ExpertEpisode, eos_id: int, max_obs_tokens: int,
                      policy: HistoryPolicy) -> list[tuple[list[int], list[int]]]:
    """(input ids, loss mask) sequences of one expert episode, one per trace as the rollout makes them under
    `env.think_history` (agents/templates/history.py): with `strip` under a template that drops earlier thinking,
    each later turn is a sequence of its own whose prompt is the template's rendering, so the warm start learns from
    the prompts it will be given; else the one stream of `episode_tokens`. Compaction (`env.context`) is RL's: the
    expert's episodes are imitated whole."""
    if policy.think_history != "strip":
        return [episode_tokens(agent, ep, eos_id, max_obs_tokens)]
    rules = HistoryRules(HistoryPolicy(think_history="strip"), agent, engine_context=0, max_new_tokens=0)
    traj = Trajectory(prompt_ids=agent.prompt_ids(ep.question, {}))
    history = rules.start(ep.question, {}, traj.prompt_ids)
    for i, turn in enumerate(ep.turns):
        ids = agent.turn_ids(turn)
        traj.append_turn(ids, [0.0] * len(ids), state="")
        if i < len(ep.observations):
            obs_ids = capped_observation_ids(agent, ep.observations[i], max_obs_tokens)
            rules.record_observation(history, ep.observations[i], max_obs_tokens)
            if (nxt := rules.next_prompt(traj, history, obs_ids)) is not None:
                traj.start_trace(*nxt)
            else:
                traj.append(obs_ids, None)
    sequences = [(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + t.loss_mask) for t in traj.traces]
    ids, mask = sequences[-1]
    return sequences[:-1] + [(ids + [eos_id], mask + [1])]


def length_report(data: list[tuple[list[int], list[int]]], cfg: TrainConfig) -> dict[str, float]:
    """Expert response lengths (tokens after the prompt, eos excluded) against the RL response budget; warns when
    the budget would cut a noticeable share of them (an RL episode cut short gets reward 0)."""
    lengths = sorted(len(mask) - 1 - mask.index(1) for _, mask in data if 1 in mask)
    if not lengths:
        return {}
    budget = cfg.rollout.max_response_tokens
    over = sum(n > budget for n in lengths) / len(lengths)
    p90 = lengths[int(0.9 * (len(lengths) - 1))]
    if over > OVER_BUDGET_WARN_FRAC:
        log.warning("sft: %.0f%% of the expert episodes are longer than rollout.max_response_tokens=%d (p90 %d, "
                    "max %d tokens); RL and evaluation will cut such episodes before they finish. Raise "
                    "rollout.max_response_tokens or shorten the observations", 100 * over, budget, p90, lengths[-1])
    return {"expert_response_tokens_p90": p90, "expert_response_tokens_max": lengths[-1],
            "expert_over_response_budget": round(over, 4)}


def play_expert(cfg: TrainConfig, index: int) -> ExpertEpisode:
    """SFT example `index`: the env's imperfect expert plays it through the env as rollouts use it."""
    player = expert_player(cfg.env.id)
    env = make_env(cfg.env)
    try:
        return player(cfg, env, index)
    finally:
        env.close()


def collect_expert_data(cfg: TrainConfig, show_progress: bool = True) -> list[ExpertEpisode]:
    with ThreadPoolExecutor(max_workers=4) as pool, \
            progress_bar("expert episodes", cfg.sft.num_examples, enabled=show_progress) as bar:
        episodes = []
        for ep in pool.map(lambda i: play_expert(cfg, i), range(cfg.sft.num_examples)):
            episodes.append(ep)
            bar.advance()
    return episodes


def model_context(data: list[tuple[list[int], list[int]]], cfg: TrainConfig) -> int:
    """The tiny model's context (`max_position_embeddings`, which vLLM enforces): the smallest power of two, at
    least 1,024, that holds every SFT sequence and the longest prompt plus the RL response budget. (A fixed 1,024
    once cut WebShop and household rollouts short: a turn whose context was full got no tokens.)"""
    longest = max(len(ids) for ids, _ in data)
    prompt = max(mask.index(1) for _, mask in data if 1 in mask)
    need = max(longest, prompt + cfg.rollout.max_response_tokens)
    return max(1024, 1 << (need - 1).bit_length())


def check_sft_config(cfg: TrainConfig) -> None:
    """Refuse, as a `ConfigError` (one line, exit 2), what SFT cannot build: an env without an expert, a
    dataset, whose problems the scripted expert cannot solve, and a `model.path` with no local checkpoint."""
    if cfg.env.dataset:
        raise ConfigError(f"env.dataset={cfg.env.dataset!r}: `alprl sft` cannot warm-start on a dataset: the scripted "
                          "expert solves generated tasks only (a dataset problem has no solution code). Build the "
                          "warm start without env.dataset, then `alprl train` with env.dataset")
    try:
        expert_player(cfg.env.id)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.model.path:
        sft_base.base_checkpoint_dir(cfg)


def run_sft(cfg: TrainConfig, *, show_progress: bool = True, force: bool = False) -> Path:
    """Build + train the warm-start model into `cfg.sft.output_dir` (reused if its fingerprint matches; an
    interrupted build continues from its resume point, see `trainer/sft/resume.py`, unless `force`)."""
    check_sft_config(cfg)
    out = Path(cfg.sft.output_dir)
    meta_path = out / META_FILE
    fingerprint = sft_fingerprint(cfg)
    if not force and meta_path.exists() and json.loads(meta_path.read_text()).get("fingerprint") == fingerprint:
        return out
    if force:
        sft_resume.clear(out)
    torch.manual_seed(cfg.sft.seed)
    t0 = time.monotonic()
    base_model, base_tokenizer = sft_base.load_base(cfg) if cfg.model.path else (None, None)
    prepared = sft_resume.load_prepared(out, fingerprint)
    if prepared is None:
        tokenizer, data, info = prepare_data(cfg, show_progress, base_tokenizer)
        info["expert_data_seconds"] = round(time.monotonic() - t0, 1)
        sft_resume.save_prepared(out, fingerprint, tokenizer, data, info)
    else:
        tokenizer, data, info = prepared
    start = None if prepared is None else sft_resume.saved_step(out, fingerprint)
    if start is not None:
        log.warning("sft: resuming %s from step %d (its resume point); --force starts over", out, start)
    if cfg.model.path:
        model = base_model
        sft_base.check_context(model, data, cfg)
        info = {**info, "context": model.config.max_position_embeddings, "base_model": cfg.model.path}
    else:
        model = build_tiny_model(tokenizer, hidden_size=cfg.model.hidden_size, num_layers=cfg.model.num_layers,
                                 num_heads=cfg.model.num_heads, num_kv_heads=cfg.model.num_kv_heads,
                                 intermediate_size=cfg.model.intermediate_size,
                                 max_position_embeddings=info["context"], seed=cfg.sft.seed)
    t1 = time.monotonic()
    logger = MetricLogger(out, resume_step=start)
    run_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.sft.torch_threads or run_threads)
    try:
        losses = train_on_sequences(model, data, cfg, tokenizer.pad_token_id, show_progress, logger,
                                    resume=sft_resume.ResumeTarget(out, fingerprint, cfg.sft.save_every))
        sft_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(run_threads)
        logger.close()
    t2 = time.monotonic()
    resume_point = sft_resume.resume_dir(out) / sft_resume.STATE_FILE
    kept = (f"`alprl sft` continues from its resume point {resume_point}" if resume_point.exists() else
            "the SFT reruns from the start")
    with disk_full_as_error(out, f"the SFT model {out}", tensor_bytes(model.state_dict()), kept,
                            lambda: (out / "model.safetensors").unlink(missing_ok=True)):
        save_pretrained(model, tokenizer, out)
        write_run_config(out, cfg)
    meta = {"fingerprint": fingerprint, "inputs": sft_inputs(cfg), "num_examples": len(data), "final_loss": losses[-1],
            "num_parameters": sum(p.numel() for p in model.parameters()), **info,
            "train_seconds": round(t2 - t1, 1), "torch_threads": sft_threads, "resumed_from_step": start or 0}
    meta_path.write_text(json.dumps(meta, indent=2))
    sft_resume.clear(out)
    if cfg.model.path:  # `alprl train` with this same model.path would start from the checkpoint, not from here
        log.warning("sft: fine-tuned %s into %s; start RL from it with model.path=%s", cfg.model.path, out, out)
    return out


def prepare_data(cfg: TrainConfig, show_progress: bool = True, tokenizer: PreTrainedTokenizerBase | None = None
                 ) -> tuple[PreTrainedTokenizerBase, list[tuple[list[int], list[int]]], dict[str, float]]:
    """Play the expert episodes, train the tokenizer on them (unless `tokenizer`, a checkpoint's, is given) and
    tokenize them like rollouts; returns the tokenizer, the (ids, loss mask) sequences and what sft_meta.json
    reports of them (expert success, lengths, the tiny model's context)."""
    episodes = collect_expert_data(cfg, show_progress)
    if tokenizer is None:
        corpus = [env_entry(cfg.env.id).system_prompt(cfg.env.style)] + [ep.question for ep in episodes]
        corpus += [t for ep in episodes for t in ep.turns] + [o for ep in episodes for o in ep.observations]
        tokenizer = train_tokenizer(corpus, vocab_size=cfg.model.vocab_size, chat_template=cfg.model.chat_template)
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    else:
        eos = sft_base.turn_end_id(tokenizer, cfg.model.path)
    agent = make_agent(cfg.env, tokenizer)
    policy = rollout_limits(cfg).history
    data = [seq for ep in episodes for seq in episode_sequences(agent, ep, eos, cfg.rollout.max_obs_tokens, policy)]
    info = {"expert_success": sum(ep.reward for ep in episodes) / len(episodes), **length_report(data, cfg),
            "context": model_context(data, cfg)}
    return tokenizer, data, info


def train_on_sequences(model: torch.nn.Module, data: list[tuple[list[int], list[int]]], cfg: TrainConfig,
                       pad_id: int, show_progress: bool = True, logger: MetricLogger | None = None,
                       resume: sft_resume.ResumeTarget | None = None) -> list[float]:
    """Masked next-token cross-entropy, AdamW, warm-up then cosine decay to 10%; returns per-step losses (and
    logs sft/loss, sft/lr, sft/epoch and sft/tokens, the assistant tokens of the batch, to `logger` if given).
    With `resume`, starts from its saved step (if any), saves every `save_every` steps, and on SIGINT/SIGTERM
    saves after the step in flight before stopping; a resumed run replays the remaining steps exactly.

    The floor matters for tiny models: copying numbers (induction) appears abruptly after a few hundred
    steps, and a schedule that has already decayed to ~0 by then never gets there.
    """
    rng = random.Random(derive_seed("sft-batches", cfg.sft.seed))
    steps_per_epoch = math.ceil(len(data) / cfg.sft.batch_size)
    total = steps_per_epoch * cfg.sft.epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.sft.lr, betas=(0.9, 0.95), weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 30) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / total))))
    done, losses = (0, []) if resume is None else sft_resume.load_state(resume.out, resume.fingerprint, model,
                                                                          optimizer, schedule)

    def save() -> None:
        if resume is not None:
            sft_resume.save_state(resume.out, resume.fingerprint, len(losses), losses, model, optimizer, schedule)

    model.train()
    with progress_bar("SFT", total, completed=done, enabled=show_progress) as bar, \
            sft_resume.StopBetweenSteps() as stop:
        for epoch in range(cfg.sft.epochs):
            order = list(range(len(data)))
            rng.shuffle(order)  # every epoch's shuffle, also those a resumed run skips, keeps the orders exact
            for start in range(0, len(order), cfg.sft.batch_size):
                if epoch * steps_per_epoch + start // cfg.sft.batch_size < done:
                    continue
                ids, mask = _pad([data[i] for i in order[start: start + cfg.sft.batch_size]], pad_id)
                logits = model(input_ids=ids, attention_mask=(mask >= 0).long()).logits[:, :-1]  # (B, L-1, V)
                target_mask = (mask[:, 1:] == 1).float()  # (B, L-1): predict sampled tokens only
                nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
                loss = (nll * target_mask).sum() / target_mask.sum().clamp(min=1)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                schedule.step()
                losses.append(loss.item())
                if logger is not None:
                    logger.log(len(losses), {"sft/loss": losses[-1], "sft/lr": lr, "sft/epoch": float(epoch),
                                             "sft/tokens": float(target_mask.sum())})
                bar.advance(loss=loss.item())
                if stop.requested is not None:
                    save()
                    stop.raise_stop()
                if resume is not None and resume.save_every > 0 and len(losses) % resume.save_every == 0 \
                        and len(losses) < total:
                    save()
    model.eval()
    return losses


def _pad(rows: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to (B, L); mask is -1 on padding, 0 on prompt/observation, 1 on assistant tokens."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, (row_ids, row_mask) in enumerate(rows):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        mask[i, : len(row_mask)] = torch.tensor(row_mask)
    return ids, mask
