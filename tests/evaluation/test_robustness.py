"""Robustness evaluator on the real tiny Qwen2 model: what each family changes (and what it must not), exact
clean reproduction, the original left alone, and a sweep over real TIR env episodes that writes a report."""

import base64
import copy
import json
import re

import gymnasium as gym
import pytest
import torch

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.formats.tir_agent import TIRAgent
from agents.models import build_tiny_model, save_pretrained
from agents.perturbation import decoder_layers
from agents.rollout import RolloutLimits
from envs.tir.tasks import task_from_id
from evaluation.evaluate import EvalSettings
from evaluation.robustness import (
    add_hidden_noise,
    check_families,
    fake_quantize,
    parse_quant,
    perturbed_copy,
    robustness_sweep,
    target_linears,
)
from evaluation.robustness_metrics import condition_table, degradation_curves
from evaluation.robustness_run import parse_scales, run_robustness
from trainer.config.train_config import EnvConfig


@pytest.fixture(autouse=True)
def one_thread():
    # The tiny model's matmuls are far faster on one thread than on two contended ones (shared 2-core CI).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny(tok, tied=True, seed=0):
    return build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=128, seed=seed, tie_word_embeddings=tied).eval()


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(model, snap):
    state = model.state_dict()
    return len(snap) == len(state) and all(torch.equal(v, snap[k]) for k, v in state.items())


IDS = torch.tensor([[5, 17, 60, 61, 200, 7, 9, 33, 120, 44]])


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("sparsity", [0.3, 0.5, 0.9])
def test_pruning_hits_exact_sparsity_on_targets_only(tiny_tokenizer, tied, sparsity):
    model = _tiny(tiny_tokenizer, tied)
    snap = _snapshot(model)
    pruned, info = perturbed_copy(model, "prune", sparsity, layers="1")
    targets = dict(target_linears(pruned, "1"))
    assert len(targets) == 7  # q, k, v, o, gate, up, down
    for name, lin in targets.items():
        assert int((lin.weight == 0).sum()) == round(sparsity * lin.weight.numel()), name
        if lin.bias is not None:  # Qwen2's q/k/v biases are not weights to prune
            assert torch.equal(lin.bias, snap[f"model.{name}.bias"])
    assert info["perturb_sparsity"] == pytest.approx(sparsity, abs=1e-3)
    changed = {k for k, v in pruned.state_dict().items() if not torch.equal(v, snap[k])}
    assert changed == {f"model.{n}.weight" for n in targets}  # layer 0, norms, embedding, head untouched
    assert torch.equal(pruned.get_input_embeddings().weight, snap["model.embed_tokens.weight"])
    assert torch.equal(pruned.get_output_embeddings().weight, snap["lm_head.weight"])
    if tied:  # the copy's head is still the embedding, not a detached copy of it
        assert pruned.get_output_embeddings().weight is pruned.get_input_embeddings().weight
    assert _same(model, snap)


def test_semi_structured_two_of_four(tiny_tokenizer):
    pruned, info = perturbed_copy(_tiny(tiny_tokenizer), "prune_nm", "2:4")
    for _, lin in target_linears(pruned):
        groups = lin.weight.view(lin.weight.shape[0], -1, 4)  # (O, I/4, 4)
        assert torch.equal((groups == 0).sum(-1), torch.full(groups.shape[:2], 2))
    assert info["perturb_sparsity"] == pytest.approx(0.5)


def _rel_err(weight, scale):
    kind, bits, group = parse_quant(scale)
    q = fake_quantize(weight, kind, bits, group)
    return float((q - weight).norm() / weight.norm()), q


def test_quantization_error_decreases_int4_fp8_int8(tiny_tokenizer):
    model = _tiny(tiny_tokenizer)
    for name, lin in target_linears(model):
        w = lin.weight.detach()
        e4, _ = _rel_err(w, "int4")
        e4g, _ = _rel_err(w, "int4-g32")
        e8, q8 = _rel_err(w, "int8")
        ef, _ = _rel_err(w, "fp8")
        # fp8-e4m3 keeps 3 mantissa bits (relative step 2^-3) vs int8's 255 levels per row: in between.
        assert e4 > ef > e8 > 0, (name, e4, ef, e8)
        assert e4g < e4, name  # smaller groups → finer steps
        steps = q8 / (w.abs().amax(1, keepdim=True) / 127)  # int8 values are integers times the row scale
        assert torch.allclose(steps, steps.round(), atol=1e-3)
        assert torch.allclose(fake_quantize(q8, "int", 8), q8, atol=1e-7)  # on the grid: a fixed point
    assert torch.equal(fake_quantize(torch.zeros(3, 8), "int", 4), torch.zeros(3, 8))  # no 0/0


def test_quant_family_reports_error_and_leaves_embeddings(tiny_tokenizer):
    model = _tiny(tiny_tokenizer)
    snap = _snapshot(model)
    errs = {s: perturbed_copy(model, "quant", s)[1]["perturb_weight_rel_err"]
            for s in ("int4", "fp8", "int8")}
    assert errs["int4"] > errs["fp8"] > errs["int8"] > 0
    quantized, _ = perturbed_copy(model, "quant", "int4")
    assert torch.equal(quantized.get_input_embeddings().weight, snap["model.embed_tokens.weight"])
    assert _same(model, snap)


def test_noise_scale_zero_gives_exactly_the_clean_logits(tiny_tokenizer):
    model = _tiny(tiny_tokenizer)
    clean = model(input_ids=IDS).logits
    noisy0, _ = perturbed_copy(model, "noise", 0.0)
    assert all(len(b._forward_pre_hooks) == 1 for b in decoder_layers(noisy0))  # hooks attached, adding zeros
    assert torch.equal(noisy0(input_ids=IDS).logits, clean)
    a, _ = perturbed_copy(model, "noise", 0.3, seed=1)
    b, _ = perturbed_copy(model, "noise", 0.3, seed=1)
    c, _ = perturbed_copy(model, "noise", 0.3, seed=2)
    la, lb, lc = (m(input_ids=IDS).logits for m in (a, b, c))
    assert torch.equal(la, lb) and not torch.equal(la, clean) and not torch.equal(la, lc)
    assert not torch.equal(a(input_ids=IDS).logits, la)  # fresh noise on the next forward (decoding steps)
    assert all(not blk._forward_pre_hooks for blk in decoder_layers(model))


def test_noise_is_relative_to_the_hidden_state_rms(tiny_tokenizer):
    model = _tiny(tiny_tokenizer)
    seen = {}
    add_hidden_noise(model, 0.25, layers="1", seed=0)  # runs first: the capture hook below sees h̃
    clean_model = _tiny(tiny_tokenizer)
    for name, m in (("noisy", model), ("clean", clean_model)):
        capture = lambda mod, args, name=name: seen.setdefault(name, args[0])  # noqa: E731
        decoder_layers(m)[1].register_forward_pre_hook(capture)
    long_ids = torch.randint(0, 384, (4, 64), generator=torch.Generator().manual_seed(0))
    model(input_ids=long_ids), clean_model(input_ids=long_ids)
    h, noisy = seen["clean"], seen["noisy"]
    ratio = (noisy - h).pow(2).mean(-1).sqrt() / h.pow(2).mean(-1).sqrt()  # (B, T): ≈ 0.25 per token
    assert ratio.mean().item() == pytest.approx(0.25, rel=0.05)


def test_bad_family_and_scale_names_fail_clearly(tiny_tokenizer):
    with pytest.raises(ValueError, match="valid: noise, prune, prune_nm, quant"):
        check_families(["blur"])
    with pytest.raises(ValueError, match="int2..int8"):
        parse_quant("int9")
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        perturbed_copy(_tiny(tiny_tokenizer), "prune", 1.0)
    with pytest.raises(ValueError, match="not a number"):
        perturbed_copy(_tiny(tiny_tokenizer), "noise", "loud")
    calls = []
    with pytest.raises(ValueError, match="relative noise >= 0"):  # the grid is checked before any evaluation
        robustness_sweep(_tiny(tiny_tokenizer), calls.append, ["noise"], {"noise": [0.1, -1.0]})
    assert calls == []
    with pytest.raises(ValueError, match="N:M"):
        perturbed_copy(_tiny(tiny_tokenizer), "prune_nm", "4:2")
    assert parse_scales("noise=0.1,0.2;quant=int8") == {"noise": [0.1, 0.2], "quant": ["int8"]}
    with pytest.raises(ValueError, match="family=v1"):
        parse_scales("noise")


def test_sweep_never_modifies_the_original(tiny_tokenizer):
    model = _tiny(tiny_tokenizer)
    snap = _snapshot(model)
    seen_ids = []

    def run_eval(m):  # one fake "episode": the greedy next token after IDS
        seen_ids.append(id(m))
        return [{"index": 0, "task_type": "t", "won": True, "reward": 1.0}]

    records = robustness_sweep(model, run_eval, ["noise", "prune", "prune_nm", "quant"],
                               {"noise": [1.0], "prune": [0.9], "prune_nm": ["1:4"], "quant": ["int2"]},
                               probe_ids=[IDS[0].tolist()])
    assert [r["condition"] for r in records] == [
        "clean@0.0", "noise@1.0", "prune@0.9", "prune_nm@1:4", "quant@int2"]
    assert id(model) not in seen_ids  # even the clean condition ran on a copy
    assert _same(model, snap) and all(not b._forward_pre_hooks for b in decoder_layers(model))
    assert records[0]["probe_kl"] == 0.0 and all(r["probe_kl"] > 0 for r in records[1:])


def _synthetic(family, scale, wins, types=("a", "b")):
    return [{"index": i, "sample": 0, "task_type": types[i % 2], "won": bool(w), "reward": float(w),
             "family": family, "scale": scale, "condition": f"{family}@{scale}"} for i, w in enumerate(wins)]


def _paired(family, scale, wins_per_task):
    """Records of one condition: task i played len(wins_per_task[i]) samples, won as listed."""
    return [{"index": i, "sample": j, "task_type": "t", "won": bool(w), "reward": float(w), "family": family,
             "scale": scale, "condition": f"{family}@{scale}"}
            for i, wins in enumerate(wins_per_task) for j, w in enumerate(wins)]


def test_paired_change_and_retention_intervals_on_hand_made_records(tmp_path):
    from evaluation.reports.robustness_report import write_robustness_report

    # 8 tasks × 2 samples. Clean wins tasks 0-3 twice and tasks 4-7 once (per task 1, 1, 1, 1, .5, .5, .5, .5);
    # noise@0.1 loses one sample of every task, so every paired per-task change is −0.5 and every resample of
    # tasks has mean change −0.5: the interval is the point, while clean's own success interval is wide.
    clean = _paired("clean", 0.0, [[1, 1]] * 4 + [[1, 0]] * 4)
    noise = _paired("noise", 0.1, [[0, 1]] * 4 + [[0, 0]] * 4)
    table = condition_table(clean + noise)
    assert table[0]["change"] == 0.0 and table[0]["change_ci"] is None and table[0]["retention_ci"] is None
    assert table[1]["success"] == 0.25 and table[1]["change"] == -0.5 and table[1]["change_ci"] == [-0.5, -0.5]
    assert table[0]["success_ci"][1] - table[0]["success_ci"][0] >= 0.25  # unpaired, the task mix shows

    # Retention: clean wins tasks 0-3 twice and 4-7 never; quant@int4 wins tasks 0-3 once. Every task keeps half
    # its clean success, so every resample's ratio is 0.5 (the ~1/256 of resamples with tasks 4-7 only have no
    # clean success and sort to the ends, far from the 2.5% and 97.5% points).
    clean = _paired("clean", 0.0, [[1, 1]] * 4 + [[0, 0]] * 4)
    quant = _paired("quant", "int4", [[1, 0]] * 4 + [[0, 0]] * 4)
    row = condition_table(clean + quant)[1]
    assert row["retention"] == 0.5 and row["retention_ci"] == [0.5, 0.5] and row["change"] == -0.25
    # pairs are (task, sample), not record positions: the condition's records reversed pair the same episodes
    # (by position, clean's tasks 0-3 would meet quant's tasks 7-4 and the reverse: changes −1 and +0.5)
    reversed_row = condition_table(clean + quant[::-1])[1]
    assert [reversed_row[k] for k in ("change", "change_ci", "retention_ci")] == \
        [row[k] for k in ("change", "change_ci", "retention_ci")]

    # Two tasks, one sample: a resample is {0, 0}, {0, 1} or {1, 1} (1/4, 1/2, 1/4 of 1000), so both bounds are
    # the extremes. prune@0.5 loses task 1: changes {0, −1} → [−1, 0]; retention {1, 0.5, 0} → [0, 1].
    # prune@0.9 swaps which task is won: retention 0/1, 1/0 (no clean success: unbounded) or 1 → [0, None].
    lost = condition_table(_paired("clean", 0.0, [[1], [1]]) + _paired("prune", 0.5, [[1], [0]]))[1]
    assert lost["change_ci"] == [-1.0, 0.0] and lost["retention_ci"] == [0.0, 1.0]
    write_robustness_report(tmp_path, _paired("clean", 0.0, [[1], [0]]) + _paired("prune", 0.9, [[0], [1]]))
    saved = json.loads((tmp_path / "robustness.json").read_text())  # what the report keeps carries them
    swapped = saved["conditions"][1]
    assert swapped["retention"] == 1.0 and swapped["retention_ci"] == [0.0, None]
    assert saved["curves"]["prune"]["retention_ci"] == [None, [0.0, None]]
    assert saved["curves"]["prune"]["change_ci"] == [None, [-1.0, 1.0]]

    with pytest.raises(ValueError, match=r"noise@0.1 did not play the clean run's episodes \(missing \(task, "
                                         r"sample\) \[\(7, 1\)\]"):
        condition_table(_paired("clean", 0.0, [[1, 1]] * 8) + noise[:-1])
    with pytest.raises(ValueError, match="has no 'sample' field"):
        condition_table(_paired("clean", 0.0, [[1]]) +
                        [{k: v for k, v in r.items() if k != "sample"} for r in _paired("noise", 0.1, [[1]])])


def test_reductions_worked_example():
    records = (_synthetic("clean", 0.0, [1, 1, 1, 0]) + _synthetic("noise", 0.2, [1, 0, 1, 0])
               + _synthetic("noise", 0.1, [1, 1, 0, 0]) + _synthetic("quant", "int4", [0, 0, 0, 0]))
    table = condition_table(records)
    assert [r["condition"] for r in table] == ["clean@0.0", "noise@0.2", "noise@0.1", "quant@int4"]
    assert table[0]["success"] == 0.75 and table[1]["retention"] == pytest.approx(0.5 / 0.75)
    # per type: clean a = {0, 2} → 1.0, b = {1, 3} → 0.5; noise@0.2 a → 1.0, b → 0.0
    assert table[1]["per_type"]["a"] == {"success": 1.0, "episodes": 2, "retention": 1.0}
    assert table[1]["per_type"]["b"]["retention"] == 0.0
    curves = degradation_curves(table)
    noise = curves["noise"]
    assert noise["x"] == [0.0, 0.1, 0.2]  # sorted, clean at 0
    r = 0.5 / 0.75
    # trapezoids: [0, .1] (1 + r)/2·.1, [.1, .2] (r + r)/2·.1, divided by the range 0.2
    assert noise["retention_auc"] == pytest.approx(((1 + r) / 2 * 0.1 + r * 0.1) / 0.2)
    assert noise["mean_retention"] == pytest.approx(r)
    assert curves["quant"]["x"] == ["clean", "int4"] and curves["quant"]["retention_auc"] is None
    assert curves["quant"]["mean_retention"] == 0.0
    none_clean = condition_table(_synthetic("clean", 0.0, [0, 0]) + _synthetic("noise", 0.1, [0, 1]))
    assert none_clean[1]["retention"] is None  # undefined, not 0 or inf
    with pytest.raises(ValueError, match="no clean records"):
        condition_table(_synthetic("noise", 0.1, [1]))


@pytest.fixture(scope="module")
def solver_dir(tmp_path_factory, tiny_tokenizer):
    """The tiny model overfit to answer test tasks 0-3 of the TIR env directly (`\\boxed{gold}`), so the
    clean policy solves them and a perturbation has something to break."""
    torch.set_num_threads(1)
    model, agent = _tiny(tiny_tokenizer).train(), TIRAgent(tiny_tokenizer)
    env = gym.make("alprl/TIRMath-v0", difficulty=None, max_turns=5)  # every level, as the sweep below plays
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    rows = []
    for i in range(4):
        obs, info = env.reset(seed=i, options={"split": "test", "index": i})
        gold = task_from_id(info["task_id"]).answer
        answer = tiny_tokenizer.encode(f"\\boxed{{{gold}}}", add_special_tokens=False) + [eos]
        rows.append((agent.prompt_ids(obs, info), answer))
    width = max(len(p) + len(a) for p, a in rows)
    ids, labels = torch.zeros((4, width), dtype=torch.long), torch.full((4, width), -100)
    attn = torch.zeros((4, width), dtype=torch.long)
    for j, (p, a) in enumerate(rows):
        ids[j, : len(p) + len(a)] = torch.tensor(p + a)
        labels[j, len(p): len(p) + len(a)] = torch.tensor(a)
        attn[j, : len(p) + len(a)] = 1
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    env.close()
    return save_pretrained(model.eval(), tiny_tokenizer, tmp_path_factory.mktemp("solver") / "model")


def test_sweep_over_real_tir_episodes_writes_report(solver_dir, tmp_path):
    scales = {"noise": [0.0, 4.0], "prune": [0.0, 0.95], "quant": ["int8", "int2"]}
    # the generated env as the solver was trained on it: every difficulty and task type, 5 turns
    settings = EvalSettings(env=EnvConfig(difficulty=0, max_turns=5),
                            limits=RolloutLimits(24, 48, 32, mask_void_turns=False),
                            samples_per_task=1, greedy=True, temperature=1.0, top_p=1.0, top_k=0, seed=0, num_envs=16)
    lines = []
    page = run_robustness(solver_dir, settings, ["noise", "prune", "quant"], scales, tmp_path, num_tasks=4,
                          progress=lines.append)
    # a line naming the sweep, then one per condition as it finishes, in order, with its success
    assert lines[0] == f"robustness of {solver_dir}: 7 conditions (clean first), each on the same 4 tasks × 1 sample"
    order = ["clean@0.0", "noise@0.0", "noise@4.0", "prune@0.0", "prune@0.95", "quant@int8", "quant@int2"]
    done = [re.fullmatch(r"\[(\d)/7\] (\S+): success ([\d.]+)% of 4 episodes(, [-+][\d.]+ points vs clean)?"
                         r"(, probe KL \S+)?, \d+ s", line) for line in lines[1:]]
    assert all(done) and [(int(m[1]), m[2]) for m in done] == list(enumerate(order, 1)), lines
    assert done[0][4] is None and done[0][5] is None, lines[1]  # clean: no change against itself, no KL
    assert all(m[4] and m[5] for m in done[1:]), lines
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(records) == 7 * 4 and {r["task_id"] for r in records} == {f"tir/test/{i}" for i in range(4)}
    by_cond = {}
    for r in records:
        by_cond.setdefault(r["condition"], []).append(r)
    episode = [{k: v for k, v in r.items() if k not in ("family", "scale", "condition", "perturb_noise_scale",
                                                        "perturb_sparsity")} for r in by_cond["clean@0.0"]]
    for zero in ("noise@0.0", "prune@0.0"):  # scale 0 replays the clean episodes exactly
        assert [{k: v for k, v in r.items() if k in episode[0]} for r in by_cond[zero]] == episode
    summary = json.loads((tmp_path / "robustness.json").read_text())
    success = {c["condition"]: c["success"] for c in summary["conditions"]}
    assert success["clean@0.0"] == 1.0 and success["quant@int8"] == 1.0
    assert success["noise@4.0"] < 1.0 and success["prune@0.95"] < 1.0
    assert summary["curves"]["noise"]["retention"][0] == 1.0
    for m, row in zip(done, summary["conditions"], strict=True):  # the progress lines give the report's figures
        assert float(m[3]) == pytest.approx(100 * row["success"], abs=0.05)
    by_name = {c["condition"]: c for c in summary["conditions"]}
    # scale 0 replays clean: no change in any resample; int8 keeps the solver's answers too
    assert by_name["noise@0.0"]["change_ci"] == [0.0, 0.0] and by_name["quant@int8"]["retention_ci"] == [1.0, 1.0]
    html = page.read_text()
    images = re.findall(r"src='data:image/png;base64,([^']+)'", html)
    assert len(images) == 6  # success × 3 families, change, retention, probe KL
    assert all(base64.b64decode(img).startswith(b"\x89PNG\r\n\x1a\n") for img in images)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "change.png", "probe_kl.png", "retention.png", "success_noise.png", "success_prune.png", "success_quant.png"]
    before = copy.deepcopy(summary)
    from evaluation.reports.robustness_report import write_robustness_report

    write_robustness_report(tmp_path)  # re-rendered from the directory alone
    assert json.loads((tmp_path / "robustness.json").read_text()) == before


def test_grouped_quantization_handles_a_partial_last_group():
    from evaluation.robustness import fake_quantize

    w = torch.randn(4, 40, generator=torch.Generator().manual_seed(0))  # 40 = 32 + a partial group of 8
    q = fake_quantize(w, "int", bits=4, group_size=32)
    assert q.shape == w.shape
    # the partial group is quantized on its own scale: its values sit on that group's 4-bit grid
    tail = w[:, 32:]
    scale = tail.abs().amax(-1, keepdim=True) / 7
    assert torch.allclose(q[:, 32:], (tail / scale).round().clamp(-7, 7) * scale, atol=1e-6)
