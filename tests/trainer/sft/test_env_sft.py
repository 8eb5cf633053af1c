"""Household and WebShop training data and plumbing: expert episodes, task indices, an SFT → rollout smoke.

Real parts only: the registered envs, their imperfect experts, a tokenizer trained on the expert corpus, a tiny
Qwen2 model trained by `run_sft`, the default engine (vLLM where installed) and the rollout driver; the
preset smoke runs use the transformers engine (one vLLM start per run would cost ~20 s).
"""

from __future__ import annotations

import itertools
import statistics

import pytest

from agents.env_families import env_entry, make_agent, make_env
from agents.experts import clicked_as_shown
from agents.models import train_tokenizer
from agents.rollout import RolloutLimits, run_episodes
from envs.splits import sft_index
from envs.webshop.goals import instruction_query
from evaluation.evaluate import evaluation_records
from trainer.components import build_components
from trainer.config.train_config import CONFIG_DIR
from trainer.loop import train
from trainer.setup.build import build_config
from trainer.sft.train import episode_tokens, length_report, play_expert, run_sft
from trainer.tasks import episode_specs

ENVS = ["alprl/Household-v0", "alprl/WebShop-v0"]
TINY = {"alprl/Household-v0": "household_tiny.yaml", "alprl/WebShop-v0": "webshop_tiny.yaml"}
SMALL = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=1", "model.num_kv_heads=1",
         "model.intermediate_size=64", "model.vocab_size=320", "sft.num_examples=12", "sft.epochs=1",
         "sft.batch_size=6", "env.max_steps=3", "rollout.prompts_per_step=2", "rollout.group_size=2",
         "rollout.max_new_tokens=12", "rollout.max_response_tokens=1200", "rollout.max_obs_tokens=800",
         "optim.micro_batch_size=4", "eval_tasks=0"]


def _episodes(cfg, n):
    return [play_expert(cfg, i) for i in range(n)]


def _tokenizer(cfg, episodes):
    corpus = [env_entry(cfg.env.id).system_prompt(cfg.env.style)] + [e.question for e in episodes] + [t for e in episodes for t in e.turns]
    return train_tokenizer(corpus + [o for e in episodes for o in e.observations], vocab_size=320)


@pytest.mark.parametrize("env_id", ENVS)
def test_expert_episodes_replay_from_their_tokens(env_id):
    """Turns re-tokenize to the very actions the env took: replaying them reproduces every observation."""
    cfg = build_config(CONFIG_DIR / TINY[env_id])
    episodes = _episodes(cfg, 12)
    assert episodes == _episodes(cfg, 12)  # seeded: the same data on every run
    agent = make_agent(cfg.env, _tokenizer(cfg, episodes))
    env = make_env(cfg.env)
    for i, ep in enumerate(episodes):
        obs, _ = env.reset(seed=i, options={"split": "train", "index": sft_index(i)})
        assert obs == ep.question and len(ep.turns) == len(ep.observations) + 1
        for k, turn in enumerate(ep.turns):
            assert turn.endswith("\n") and turn.count("\n") == 1
            obs, reward, term, trunc, _ = env.step(agent.decode(agent.turn_ids(turn)))
            if k < len(ep.observations):
                assert obs == ep.observations[k] and not (term or trunc)
        assert (term or trunc) and reward == ep.reward


@pytest.mark.parametrize("env_id", ENVS)
def test_sft_observations_are_cut_like_rollout_observations(env_id):
    cfg = build_config(CONFIG_DIR / TINY[env_id])
    episodes = _episodes(cfg, 3)
    tok = _tokenizer(cfg, episodes)
    agent, eos = make_agent(cfg.env, tok), tok.convert_tokens_to_ids("<|im_end|>")
    for ep in episodes:
        full_ids, _ = episode_tokens(agent, ep, eos)
        ids, mask = episode_tokens(agent, ep, eos, max_obs_tokens=7)
        after_prompt = mask[mask.index(1):]
        runs = [len(list(group)) for m, group in itertools.groupby(after_prompt) if m == 0]  # observations
        assert len(runs) == len(ep.observations) and all(n <= 7 for n in runs)
        assert len(full_ids) - len(ids) == sum(len(agent.observation_ids(o)) - 7 for o in ep.observations
                                               if len(agent.observation_ids(o)) > 7)


def test_length_report_warns_when_the_response_budget_cuts_expert_episodes(caplog):
    cfg = build_config(None, ["rollout.max_response_tokens=10"])
    short, long = ([0] * 4 + [1] * 5, [0] * 4 + [1] * 5), ([0] * 4 + [1] * 20, [0] * 4 + [1] * 20)
    with caplog.at_level("WARNING"):
        report = length_report([short] * 49, cfg)
    assert report["expert_over_response_budget"] == 0 and not caplog.records
    with caplog.at_level("WARNING"):
        report = length_report([short] * 40 + [long] * 10, cfg)
    assert report == {"expert_response_tokens_p90": 19, "expert_response_tokens_max": 19,
                      "expert_over_response_budget": 0.2}
    assert "20% of the expert episodes are longer than rollout.max_response_tokens=10" in caplog.text


@pytest.mark.parametrize("env_id", ENVS)
def test_tiny_config_expert_leaves_headroom(env_id):
    """The imperfect expert of each tiny recipe wins often but not always: SFT on it starts below 100%."""
    cfg = build_config(CONFIG_DIR / TINY[env_id])
    wins = [ep.reward == 1.0 for ep in _episodes(cfg, 60)]
    assert 0.4 <= statistics.fmean(wins) <= 0.95


def test_webshop_sft_expert_reads_the_pages_unless_privileged():
    """By default the SFT expert searches the instruction's words as written and opens results in rank order; the
    oracle (`env.expert_privileged`) searches with the target's type first and opens the target."""
    exact = ["env.expert_epsilon=0", "env.expert_wrong_option_p=0"]
    reader = build_config(CONFIG_DIR / TINY["alprl/WebShop-v0"], exact)
    oracle = build_config(CONFIG_DIR / TINY["alprl/WebShop-v0"], exact + ["env.expert_privileged=true"])
    env = make_env(reader.env)
    for i, (r, o) in enumerate(zip(_episodes(reader, 8), _episodes(oracle, 8), strict=True)):
        env.reset(seed=i, options={"split": "train", "index": sft_index(i)})
        goal = env.unwrapped.shop.goal
        assert r.turns[0] == f"search[{instruction_query(goal)}]\n" and o.turns[0] == f"search[{goal.expert_query}]\n"
        assert o.reward == 1.0 and f"click[{goal.asin}]\n" in o.turns
        first = env.unwrapped.catalog.index.search(instruction_query(goal), 1)[0]
        assert r.turns[1] == f"click[{env.unwrapped.catalog.products[first].asin}]\n"


def test_clicks_are_written_as_shown_on_the_page():
    page = "Back to Search [SEP] < Prev [SEP] B0ABCDEFGH [SEP] Red Mug [SEP] Buy Now"
    assert clicked_as_shown("click[b0abcdefgh]", page) == "click[B0ABCDEFGH]"
    assert clicked_as_shown("click[buy now]", page) == "click[Buy Now]"
    assert clicked_as_shown("click[red]", page) == "click[red]"  # not a part of the page: unchanged
    assert clicked_as_shown("search[red mug]", page) == "search[red mug]"


@pytest.mark.parametrize("env_id", ENVS)
def test_global_indices_map_onto_the_env_splits(env_id):
    cfg = build_config(CONFIG_DIR / TINY[env_id])
    env = make_env(cfg.env)
    _, info = env.reset(seed=3, options={"split": "test", "index": 3})
    assert info["task_id"] == "test/3"
    for spec in episode_specs(cfg, "train", 1, 4, 1):
        _, info = env.reset(seed=spec.seed, options=spec.options)
        assert info["task_id"] == f"train/{spec.options['index'] - 1500}"
    with pytest.raises(ValueError, match="outside split"):
        env.reset(options={"split": "valid", "index": 3})  # global index 3 is a test task


def test_env_kwargs_reach_the_envs():
    hh = build_config(None, ["env.id=alprl/Household-v0", "env.max_steps=7", "env.task_types=pick_two_obj_and_place"])
    assert env_entry(hh.env.id).env_kwargs(hh.env) == {"task_types": ["pick_two_obj_and_place"], "max_steps": 7}
    env = make_env(hh.env)
    _, info = env.reset(options={"split": "test", "index": 0})
    assert info["task_type"] == "pick_two_obj_and_place"
    for _ in range(7):
        *_, trunc, _ = env.step("look")
    assert trunc
    ws = build_config(None, ["env.id=alprl/WebShop-v0", "env.num_products=300"])
    assert env_entry(ws.env.id).env_kwargs(ws.env) == {"num_products": 300}  # max_steps 0: the env's own limit
    assert len(make_env(ws.env).unwrapped.catalog.products) == 300


@pytest.mark.smoke
@pytest.mark.parametrize("env_id", ENVS)
def test_sft_then_rollout_keeps_masks(tmp_path, env_id):
    cfg = build_config(CONFIG_DIR / TINY[env_id], SMALL + [f"sft.output_dir={tmp_path / 'sft'}",
                                                          f"output_dir={tmp_path / 'run'}"])
    run_sft(cfg, show_progress=False)
    c = build_components(cfg)
    try:
        limits = RolloutLimits(cfg.rollout.max_new_tokens, cfg.rollout.max_response_tokens,
                               cfg.rollout.max_obs_tokens, mask_void_turns=False)
        trajs = run_episodes(c.engine, c.agent, c.envs, episode_specs(cfg, "train", 1, 2, 2), limits, seed=1,
                             pool=c.pool)
        records = evaluation_records(c.engine, c.agent, c.envs, "test", 2, limits, pool=c.pool)
    finally:
        c.close()
    assert [r["index"] for r in records] == [0, 1] and all(r["turns"] >= 1 for r in records)
    for t in trajs:
        assert len(t.response_ids) == len(t.loss_mask) == len(t.rollout_logprobs)
        assert 1 <= t.info["turns"] <= cfg.env.max_steps
        segments = []
        for tok, m, lp in zip(t.response_ids, t.loss_mask, t.rollout_logprobs, strict=True):
            assert (lp == 0.0) if m == 0 else (lp <= 0.0)
            if segments and segments[-1][1] == m:
                segments[-1][0].append(tok)
            else:
                segments.append(([tok], m))
        assert segments[0][1] == 1  # the model speaks first
        for ids, m in segments:
            if m == 0:  # an observation: one env text, then the opener of the next command line
                assert c.tokenizer.decode(ids).endswith("\n> ")


@pytest.fixture(scope="module")
def household_sft(tmp_path_factory):
    out = tmp_path_factory.mktemp("household_sft")
    return run_sft(build_config(CONFIG_DIR / TINY["alprl/Household-v0"], SMALL + [f"sft.output_dir={out}"]),
                   show_progress=False)


@pytest.mark.smoke
@pytest.mark.parametrize("preset", ["mipu", "quatro", "sprpo", "gigpo"])
def test_companion_algorithms_train_on_the_household(tmp_path, household_sft, preset):
    """`alprl train --config configs/household_tiny.yaml algorithm=<preset>`, one step, small model."""
    cfg = build_config(CONFIG_DIR / TINY["alprl/Household-v0"],
                       SMALL + [f"sft.output_dir={household_sft}", f"output_dir={tmp_path}", f"algorithm={preset}",
                                "steps=1", "save_every=1", "rollout.engine=hf", "algo.mipu_val_prompts=2"])
    (result,) = train(cfg, show_progress=False)
    m = result.metrics
    assert m["actor/grad_norm_nonfinite"] == 0 and (tmp_path / "checkpoints" / "step_1").is_dir()
    own = {"mipu": "mipu/t_post", "quatro": "actor/quatro_active_frac", "sprpo": "perturb/sprpo_gain",
           "gigpo": "gigpo/anchor_states"}[preset]
    assert any(k.startswith(own) for k in m), sorted(m)  # the algorithm's own diagnostics ran
    if preset == "gigpo":  # each group's episodes share at least their first state: the turns were recorded
        assert m["gigpo/anchor_states"] >= cfg.rollout.prompts_per_step and m["gigpo/anchor_step_frac"] > 0
