"""A verifiers taskset for tests/trainer/test_verifiers_harness.py: small products to answer, reward 1 when
the reply contains the product. verifiers finds it by plugin id (`vf-arithmetic`: this top-level module, on the
test path), and it ships alprl's in-process chat harness as its own, so an episode needs no network and no
sandbox.

`play` is the alprl harness (`env.harness=vf_arithmetic:play`): the env `build` returns, through the endpoint.
"""

from __future__ import annotations

import verifiers.v1 as vf

from agents.harnesses.verifiers_chat import ChatHarness
from agents.harnesses.verifiers_harness import verifiers_play

__all__ = ["ArithmeticTaskset", "ChatHarness"]

PAIRS = [(1, 1), (1, 2), (2, 3), (1, 4), (2, 2), (1, 3), (3, 3), (1, 5)]
"""Products of one digit, so the tiny warm start's replies (digits among other text) sometimes hold them."""


class ArithmeticData(vf.TaskData):
    answer: str


class ArithmeticTask(vf.Task[ArithmeticData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def contains_answer(self, trace: vf.Trace) -> float:
        return float(self.data.answer in trace.last_reply)


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, vf.TasksetConfig]):
    def load(self):
        for a, b in PAIRS:
            data = ArithmeticData(prompt=f"What is {a} * {b}?", answer=str(a * b))
            yield ArithmeticTask(data, self.config.task)


def build() -> vf.Env:
    """The single-agent env over this taskset, its seat on the local subprocess runtime (no Prime sandbox)."""
    return vf.load_environment(vf.SingleAgentEnvConfig(taskset=vf.TasksetConfig(id="vf-arithmetic"),
                                                       agent=vf.AgentConfig(runtime=vf.SubprocessConfig())))


play = verifiers_play(build)
