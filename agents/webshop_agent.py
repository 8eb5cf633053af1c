"""WebShop-style agent formatting: the instruction as the task, pages without it as observations.

Same command-line format as the household agent (agents/household_agent.py): one assistant message, one action
per line ("search[query]" or "click[x]", ending at the newline stop string), each page appended as
"{page}\\n> ". The page is the env's `text` observation (WebShop's simple mode, parts joined by " [SEP] ") without
the "Instruction: [SEP] {instruction}" pair, which the env repeats on every page and which is already in the user
message (verl-agent cuts it too; unlike verl-agent the parts are not quoted). Clicks are written as the button
reads on the page ("click[Buy Now]", "click[B0DYMZVVGB]"), as in ReAct's WebShop transcripts; the env lower-cases
click arguments, so either case acts.

    <|im_start|>user\\nInstruction: i need a sulfate free shampoo ...<|im_end|>\\n<|im_start|>assistant\\n
    > search[sulfate free shampoo]\\nBack to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] ...\\n> ...
"""

from __future__ import annotations

from agents.household_agent import CommandLineAgent

SEP = " [SEP] "
WEBSHOP_SYSTEM_PROMPT = ("Shop for the product in the instruction. Reply with one action per line: "
                         "search[query] or click[button].")


def page_parts(obs: str) -> list[str]:
    """The `[SEP]` parts of a page without the "WebShop" title and the "Instruction:" / instruction pair."""
    parts = obs.strip().split(SEP)
    if parts and parts[0] == "WebShop":
        parts = parts[1:]
    if "Instruction:" in parts:
        i = parts.index("Instruction:")
        parts = parts[:i] + parts[i + 2:]
    return parts


def instruction_of(obs: str) -> str:
    """The instruction text of a page ("" when the page shows none)."""
    parts = obs.strip().split(SEP)
    i = parts.index("Instruction:") if "Instruction:" in parts else len(parts)
    return parts[i + 1] if i + 1 < len(parts) else ""


class WebShopAgent(CommandLineAgent):
    """WebShop-style shop: the instruction as the task, pages without the instruction as observations."""

    system_prompt = WEBSHOP_SYSTEM_PROMPT
    max_obs_chars = 1200

    def task_text(self, first_obs: str) -> str:
        instruction = instruction_of(first_obs)
        if not instruction:
            raise ValueError("WebShopAgent: the first observation has no 'Instruction: [SEP] ...' part; "
                             f"use the env's `text` observation mode (got {first_obs[:80]!r})")
        return "Instruction: " + instruction

    def view(self, obs: str) -> str:
        return SEP.join(page_parts(obs))
