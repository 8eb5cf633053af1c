"""The scripted TIR episodes the "Qwen tool caller" memorizes (tests/agents/conftest.py): one per style, on the real
Qwen2.5 vocabulary, with Unicode everywhere and a multi-byte character sampled byte by byte.

Each script is what a policy writes on `TASK` in one style: a tool-call turn (ending exactly at the style's stop
string; hermes, under the ChatML template's tool turns, at `<|im_end|>`), the observation the agent appends for
the env's result (hermes: the template's tool turn), and the answer turn closed by `<|im_end|>` (not eos: the
checkpoint is a base one, eos `<|endoftext|>`). The memorizing loop computes logits only where the policy writes:
on a 151,936-row vocabulary the full (B, L, V) logits of the prompts would cost most of the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from qwen_vocab import byte_token_ids

from agents.control_tokens import encode_text
from agents.formats.tir_agent import TIRAgent
from envs.tir.styles import get_style
from envs.tir.tasks import generate_task

TASK = generate_task("test", 0)  # "Compute 8448 * 4126." -> 34856448
CODE = "print('分数', 8448 * 4126)"
SPLIT_WORD = "分数"  # sampled one UTF-8 byte per token: 6 tokens where the canonical encoding has 1
ANSWER = "La réponse — \\boxed{34856448}."


@dataclass
class Script:
    style: str
    prompt: list[int]
    turn_1: list[int]
    observation: list[int]
    turn_2: list[int]

    @property
    def sequence(self) -> tuple[list[int], list[int]]:
        """(ids, mask): mask 1 where the policy writes (the two turns), 0 on the prompt and the observation."""
        ids = self.prompt + self.turn_1 + self.observation + self.turn_2
        mask = [0] * len(self.prompt) + [1] * len(self.turn_1) + [0] * len(self.observation) + \
            [1] * len(self.turn_2)
        return ids, mask


ENV_OBSERVATIONS = {"simpletir": "\nCode execution result: 分数 34856448\n",
                    "hermes": "<tool_response>\n分数 34856448\n</tool_response>"}
"""What the env returns for the tool call."""
OBSERVATIONS = {**ENV_OBSERVATIONS, "hermes": "\n<|im_start|>user\n<tool_response>\n分数 34856448\n"
                                              "</tool_response><|im_end|>\n<|im_start|>assistant\n"}
"""The observation as the transcript holds it (hermes: the template's tool turn, envs/tir/styles.py)."""


def script(tok, style: str) -> Script:
    """The episode the tool caller plays on `TASK` in `style`."""
    agent = TIRAgent(tok, style)
    call = get_style(style).format_tool_call(CODE)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    turn_1 = encode_text(tok, "Je calcule ") + byte_token_ids(tok, SPLIT_WORD) + tok.encode(" d'abord.\n" + call)
    turn_1 += [im_end] if agent.tool_turn is not None else []  # a template's tool call ends the turn
    turn_2 = encode_text(tok, ANSWER) + [im_end]
    return Script(style, agent.prompt_ids(TASK.question, {}), turn_1,
                  agent.observation_ids(ENV_OBSERVATIONS[style]), turn_2)


def memorize(model: torch.nn.Module, sequences: list[tuple[list[int], list[int]]], *, steps: int = 120,
             lr: float = 5e-3, negatives: int = 4096) -> float:
    """Full-batch AdamW on next-token cross-entropy at the mask-1 positions; returns the last loss.

    The softmax runs over the tokens of the sequences plus `negatives` random others, not all 151,936: the
    script's tokens end up far above every token it was never trained against (their logits stay near 0 from the
    0.02-scale init), and a step costs a fraction of the full-vocabulary one (0.45 s against 2 s on the busy
    2-core machine). Measured on the two scripts: loss 0.02 after 100 steps at lr 5e-3 (1e-2 oscillates)."""
    width = max(len(ids) for ids, _ in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    target = torch.zeros((len(sequences), width), dtype=torch.bool)
    for row, (seq, mask) in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        target[row, : len(mask)] = torch.tensor(mask, dtype=torch.bool)
    vocab = model.lm_head.weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    candidates = torch.unique(torch.cat([ids.flatten(), torch.randint(vocab, (negatives,), generator=generator)]))
    predict_from = target[:, 1:]  # position t predicts token t + 1
    labels = torch.searchsorted(candidates, ids[:, 1:][predict_from])  # each label's place among the candidates
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        hidden = model.model(input_ids=ids).last_hidden_state[:, :-1][predict_from]  # (N, D), right padding
        logits = hidden @ model.lm_head.weight[candidates].T  # (N, C)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()
