"""configs/math_tiny.yaml, the single-turn recipe: its header's commands give the ALP paper's single-turn values,
its expert leaves headroom, and a tiny `alprl sft` on it answers each held-out problem in one boxed reply.

Real parts only: the recipe file, the registered alprl/Math-v0, its expert, `run_sft`, the transformers engine.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics

import pytest

from agents.env_families import expert_player
from agents.experts import play_math_expert
from agents.rollout import RolloutLimits
from app.cli import main, parse_args
from app.experiments.run import build_plan, cell_config
from envs.boxed import extract_boxed
from evaluation.evaluate import evaluation_records
from trainer.components import build_components
from trainer.config.train_config import CONFIG_DIR
from trainer.setup.build import build_config
from trainer.sft.train import play_expert, run_sft

RECIPE = CONFIG_DIR / "math_tiny.yaml"
SMALL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.num_kv_heads=1",
         "model.intermediate_size=128", "model.vocab_size=384", "sft.num_examples=600", "sft.epochs=3",
         "sft.batch_size=16", "sft.lr=5e-3", "rollout.prompts_per_step=4", "rollout.group_size=2",
         "optim.micro_batch_size=8", "rollout.engine=hf"]  # learns the reply's format, not yet the arithmetic


def header_commands() -> list[list[str]]:
    """The `alprl ...` command lines of the recipe's header comment, as argv lists (continuations joined)."""
    text = "\n".join(line[1:].strip() for line in RECIPE.read_text().splitlines() if line.startswith("#"))
    text = text.replace("\\\n", " ")
    return [shlex.split(re.sub(r"\s+#.*", "", line))[1:] for line in text.splitlines() if line.startswith("alprl ")]


def test_recipe_is_single_turn_with_its_own_warm_start():
    cfg = build_config(RECIPE)
    assert (cfg.env.id, cfg.env.max_turns, cfg.model.path) == ("alprl/Math-v0", 1, "")
    assert cfg.sft.output_dir == "runs/math_tiny/sft" != build_config(CONFIG_DIR / "demo.yaml").sft.output_dir
    assert cfg.rollout.max_response_tokens == cfg.rollout.max_new_tokens  # one turn is the whole response
    assert expert_player(cfg.env.id) is play_math_expert  # `alprl sft` has an expert to play


def test_header_commands_run_the_paper_single_turn_values(tmp_path):
    """k3 KL with β 1e-3 in every run; c = 10, σ0 0.02 and η_σ 1e-2 (absolute noise) in ALP runs, under a preset
    given to `alprl train` and in every experiment cell (preset above the recipe there); every command parses, and
    the experiment has its own output directory."""
    commands = header_commands()
    assert [argv[0] for argv in commands] == ["sft", "train", "train", "experiment"]
    for argv in commands[:3]:
        cfg = build_config(RECIPE, [a for a in argv if "=" in a and not a.startswith("-")])
        assert (cfg.algo.kl_type, cfg.algo.kl_coef, cfg.algo.clip_dual) == ("k3", 1e-3, 10.0)
        assert (cfg.perturb.sigma_init, cfg.perturb.lr, cfg.perturb.sigma_mode) == (0.02, 1e-2, "absolute")
    assert build_config(RECIPE, [a for a in commands[2] if "=" in a]).algo.name == "token_alp"
    argv = commands[3]
    plan = build_plan(parse_args(argv))
    assert plan.config == "configs/math_tiny.yaml" and str(plan.out) == "runs/experiments/alp_math_tiny"
    for cell in plan.cells:
        cfg = cell_config(plan.config, plan.cell_overrides(cell))
        assert (cfg.algo.kl_coef, cfg.algo.clip_dual, cfg.perturb.sigma_init, cfg.perturb.lr) == (1e-3, 10.0, 0.02,
                                                                                                  1e-2), cell.name
        assert cfg.perturb.enabled == (cell.method in ("token_alp", "seq_alp")), cell.name


def test_recipe_expert_leaves_headroom():
    """The recipe's expert wins often but not always (35% guesses, 10% miscopies: 58.5% expected)."""
    cfg = build_config(RECIPE)
    episodes = [play_expert(cfg, i) for i in range(80)]
    assert 0.4 <= statistics.fmean(ep.reward for ep in episodes) <= 0.8
    assert all(len(ep.turns) == 1 and not ep.observations and extract_boxed(ep.turns[0]) for ep in episodes)
    assert episodes[:5] == [play_expert(cfg, i) for i in range(5)]  # seeded: the same data on every run


@pytest.fixture(scope="module")
def math_sft(tmp_path_factory):
    """`alprl sft` on the recipe at a tiny size (~150 steps)."""
    out = tmp_path_factory.mktemp("math_sft")
    return run_sft(build_config(RECIPE, SMALL + [f"sft.output_dir={out}"]), show_progress=False)


@pytest.mark.smoke
def test_tiny_sft_answers_in_one_boxed_reply(tmp_path, math_sft):
    """Each held-out episode of the tiny warm start is one turn ending in `\\boxed{<integer>}.`"""
    cfg = build_config(RECIPE, SMALL + [f"model.path={math_sft}", f"output_dir={tmp_path}"])
    c = build_components(cfg)
    try:
        limits = RolloutLimits(cfg.rollout.max_new_tokens, cfg.rollout.max_response_tokens,
                               cfg.rollout.max_obs_tokens, mask_void_turns=False)
        records = evaluation_records(c.engine, c.agent, c.envs, "test", 8, limits, greedy=True, pool=c.pool)
    finally:
        c.close()
    assert [r["turns"] for r in records] == [1] * 8
    for r in records:
        assert re.search(r"\\boxed\{-?\d+\}\.$", r["response"]), r["response"]
        assert r["extracted_answer"] == extract_boxed(r["response"])


@pytest.mark.smoke
def test_header_experiment_runs_token_alp_with_the_single_turn_values(tmp_path, math_sft, capsys):
    """The header's `alprl experiment alp` at smoke scale, one Token-ALP cell of one step from the tiny start:
    σ starts at 0.02 on every layer and the k3 KL term is in the loss."""
    argv = header_commands()[3]
    user = argv[argv.index("--out") + 2:]  # the overrides after --out <dir>
    assert main(["experiment", "--exploratory", "alp", "--config", str(RECIPE), "--scale", "smoke", "--methods", "token_alp",
                 "--steps", "1", "--no-progress", "--out", str(tmp_path), f"model.path={math_sft}", *user]) == 0, \
        capsys.readouterr().err
    (step,) = [json.loads(line) for line in (tmp_path / "token_alp__lag2__seed0" / "metrics.jsonl").open()
               if "perturb/sigma_mean" in line]
    assert step["perturb/sigma_mean"] == pytest.approx(0.02, rel=0.05)  # one σ step of lr 1e-2 from 0.02
    assert step["actor/kl_loss"] >= 0 and (tmp_path / "report.json").is_file()
