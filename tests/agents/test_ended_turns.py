"""A turn that closed the assistant message (finish reason eos: eos, the template's end-of-turn
token, a `rollout.stop_token_ids` id) is never executed, and the episode ends there.

A scripted engine plays fixed turns on the real Qwen2.5 vocabulary (tests/qwen_vocab.py); the TIR env runs code
through a runner that counts its calls, so "never executed" is what the sandbox saw.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from agents.engines.base import GenerationResult
from agents.formats.tir_agent import SingleTurnMathAgent, TIRAgent
from agents.rollout import EpisodeSpec, RolloutLimits, run_episodes
from envs.tir.env import TIRMathEnv
from envs.tir.single_turn import MathEnv
from envs.tir.styles import get_style
from envs.tir.tasks import generate_task
from sandbox.execution.in_process import LocalExecutor

TASK = generate_task("test", 0)  # "Compute 8448 * 4126." -> 34856448
SPEC = EpisodeSpec(seed=0, options={"task_id": TASK.task_id}, group_id=0)
LIMITS = RolloutLimits(max_new_tokens=64, max_response_tokens=400, max_obs_tokens=64, mask_void_turns=False)


class CountingRunner:
    """The in-process executor, counting the programs it was given."""

    def __init__(self):
        self.programs: list[str] = []
        self.executor = LocalExecutor()

    def run(self, code, **kwargs):
        self.programs.append(code)
        return self.executor.run(code, **kwargs)

    def close(self):
        self.executor.close()


class ScriptedEngine:
    """Answers the k-th request of an episode with the k-th (token ids, finish reason) of its script and records
    each request's stop token ids."""

    concurrent_callers = False
    overlap_episodes = False
    max_model_len = 100_000

    def __init__(self, turns: list[tuple[list[int], str]]):
        self.turns, self.requests = list(turns), []

    def submit(self, requests, *, greedy=False, seed=None):
        futures = []
        for request in requests:
            self.requests.append(request)
            assert self.turns, f"the episode went on after its script: request {len(self.requests)}"
            ids, reason = self.turns.pop(0)
            future: Future = Future()
            future.set_result(GenerationResult(list(ids), [-0.5] * len(ids), reason))
            futures.append(future)
        return futures


def ids_of(tok, text: str, end: str | None = None) -> list[int]:
    return tok.encode(text, add_special_tokens=False) + ([tok.convert_tokens_to_ids(end)] if end else [])


def play(tok, turns, style="simpletir", runner=None):
    runner = runner or CountingRunner()
    env = TIRMathEnv(style=style, max_turns=4, runner=runner)
    engine = ScriptedEngine(turns)
    traj = run_episodes(engine, TIRAgent(tok, style), [env], [SPEC], LIMITS)[0]
    env.close()
    return traj, runner, engine


@pytest.mark.parametrize("style", ["simpletir", "torl"])  # hermes runs it: its tool turns
def test_a_code_turn_that_ends_on_im_end_is_not_run_and_ends_the_episode(qwen_tokenizer, style):
    tok = qwen_tokenizer
    call = get_style(style).format_tool_call("print(8448 * 4126)").rstrip("\n")  # no stop string: eos closes it
    turn = ids_of(tok, "Let me check.\n" + call, end="<|im_end|>")
    traj, runner, engine = play(tok, [(turn, "eos")], style=style)
    assert runner.programs == []  # before the fix: the program ran and the episode asked for another turn
    assert len(engine.requests) == 1 and engine.turns == []
    assert traj.info["unrun_tool_call"] and traj.info["message_closed"] and traj.reward == 0.0
    assert traj.response_ids == turn and traj.loss_mask == [1] * len(turn)  # the sampled turn, eos included


def test_an_answer_that_ends_on_eos_is_graded(qwen_tokenizer):
    tok = qwen_tokenizer
    code = ids_of(tok, "Let me check.\n```python\nprint(8448 * 4126)\n```\n")
    answer = ids_of(tok, "So \\boxed{34856448}.", end="<|im_end|>")
    traj, runner, _ = play(tok, [(code, "stop"), (answer, "eos")])
    assert len(runner.programs) == 1  # the tool call that ended on its stop string ran
    assert traj.reward == 1.0 and traj.info["won"] and traj.info["message_closed"]
    assert "unrun_tool_call" not in traj.info


def test_a_turn_ended_by_a_configured_stop_token_is_not_run(qwen_tokenizer):
    """`rollout.stop_token_ids`: an id that ends turns like eos (here `<|file_sep|>`, a plain added token)."""
    tok = qwen_tokenizer
    sep = tok.convert_tokens_to_ids("<|file_sep|>")
    turn = ids_of(tok, "```python\nprint(1)\n```", end="<|file_sep|>")
    env = TIRMathEnv(max_turns=4, runner=(runner := CountingRunner()))
    engine = ScriptedEngine([(turn, "eos")])
    limits = RolloutLimits(64, 400, 64, stop_token_ids=[sep], mask_void_turns=False)
    traj = run_episodes(engine, TIRAgent(tok), [env], [SPEC], limits)[0]
    env.close()
    assert sep in engine.requests[0].stop_token_ids and runner.programs == [] and traj.info["unrun_tool_call"]


def test_every_request_carries_eos_and_the_template_end_of_turn(qwen_tokenizer):
    tok = qwen_tokenizer
    code = ids_of(tok, "```python\nprint(1)\n```\n")
    _, _, engine = play(tok, [(code, "stop"), (ids_of(tok, "\\boxed{1}", end="<|im_end|>"), "eos")])
    eos, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    assert [r.stop_token_ids for r in engine.requests] == [[eos, im_end], [eos, im_end]]


def test_the_single_turn_reply_is_graded_whatever_it_holds(qwen_tokenizer):
    """No tool in alprl/Math-v0: a reply with a code block and a box is the answer, not an unrun tool call."""
    tok = qwen_tokenizer
    env = MathEnv()
    reply = ids_of(tok, "```python\nx = 1\n```\nSo \\boxed{34856448}.", end="<|im_end|>")
    traj = run_episodes(ScriptedEngine([(reply, "eos")]), SingleTurnMathAgent(tok), [env], [SPEC], LIMITS)[0]
    assert traj.reward == 1.0 and "unrun_tool_call" not in traj.info


def test_unrun_tool_calls_are_counted_in_the_rollout_metrics(qwen_tokenizer):
    from trainer.diagnostics.rollout_metrics import rollout_metrics

    tok = qwen_tokenizer
    unrun, _, _ = play(tok, [(ids_of(tok, "```python\nprint(1)\n```", end="<|im_end|>"), "eos")])
    answered, _, _ = play(tok, [(ids_of(tok, "\\boxed{34856448}", end="<|im_end|>"), "eos")])
    assert rollout_metrics([unrun, answered])["rollout/unrun_tool_call_frac"] == 0.5
