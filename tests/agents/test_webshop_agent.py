"""WebShop agent: instruction as the task, pages without the instruction, actions that the env accepts."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers alprl/*)
from agents.env_families import make_agent
from agents.formats.household_agent import command_turn
from agents.formats.webshop_agent import WEBSHOP_SYSTEM_PROMPT, WebShopAgent, instruction_of
from agents.models import train_tokenizer
from envs.webshop import expert_action

SEARCH_PAGE = "WebShop [SEP] Instruction: [SEP] i need a red mug, and price lower than 20.00 dollars [SEP] Search"
RESULTS = ("Instruction: [SEP] i need a red mug, and price lower than 20.00 dollars [SEP] Back to Search [SEP] "
           "Page 1 (Total results: 50) [SEP] Next > [SEP] B0ABCDEFGH [SEP] Red Mug [SEP] $9.99")


@pytest.fixture(scope="module")
def tok():
    env = gym.make("alprl/WebShop-v0")
    texts = [env.reset(options={"split": "test", "task_id": k})[0] for k in range(20)]
    return train_tokenizer(texts + [WEBSHOP_SYSTEM_PROMPT, RESULTS, "click[Buy Now]\n"], vocab_size=400)


class _Cfg:
    id = "alprl/WebShop-v0"
    style = "simpletir"


def test_instruction_of_a_page():
    assert instruction_of(SEARCH_PAGE) == instruction_of(RESULTS)
    assert instruction_of(RESULTS) == "i need a red mug, and price lower than 20.00 dollars"
    assert instruction_of("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0") == ""


def test_prompt_and_observation_layout(tok):
    agent = make_agent(_Cfg(), tok)
    assert isinstance(agent, WebShopAgent)
    text = tok.decode(agent.prompt_ids(SEARCH_PAGE, {}))
    assert text.endswith("<|im_start|>user\nInstruction: i need a red mug, and price lower than 20.00 dollars"
                         "<|im_end|>\n<|im_start|>assistant\n> ")
    # the env's page, one part per line, then the opener of the next action
    assert tok.decode(agent.observation_ids(RESULTS)) == RESULTS.replace(" [SEP] ", "\n") + "\n> "
    assert agent.decode(tok.encode("click[B0ABCDEFGH]\n")) == "click[B0ABCDEFGH]"


def test_first_observation_without_instruction_is_one_clear_error(tok):
    with pytest.raises(ValueError, match="Instruction"):
        WebShopAgent(tok).prompt_ids("Back to Search [SEP] Page 1", {})


def test_real_pages_fit_the_cap_and_expert_actions_round_trip(tok):
    agent = WebShopAgent(tok)
    env = gym.make("alprl/WebShop-v0")
    for k in range(10):
        first, info = env.reset(options={"split": "test", "task_id": k})
        agent.prompt_ids(first, info)
        while True:
            action = expert_action(env)
            assert agent.decode(agent.turn_ids(command_turn(action))) == action
            obs, reward, term, trunc, info = env.step(action)
            if term or trunc:
                break
            assert instruction_of(obs) == instruction_of(first)  # every page restates the instruction
            assert len(agent.view(obs)) <= agent.max_obs_chars  # pages are never cut
        assert info["won"] and reward == 1.0
