"""WebShop-style agent formatting: the instruction as the task, the env's pages as observations.

Same command-line format as the household agent (agents/formats/household_agent.py): one assistant message, one action
per line ("search[query]" or "click[x]", ending at the newline stop string), each page appended as "{page}\\n> ".
Pages are the env's `text` observations (WebShop's simple mode) with one part per line instead of " [SEP] " (one
token instead of four; ReAct lists clickables one per line too). They restate the instruction at the top of every
page, next to the options and results it is matched against (verl-agent restates the task every step too).
Clicks are written as the button reads on the page ("click[Buy Now]", "click[B0DYMZVVGB]"), as in ReAct's WebShop
transcripts; the env lower-cases click arguments, so either case acts.

    <|im_start|>user\\nInstruction: i need a sulfate free shampoo ...<|im_end|>\\n<|im_start|>assistant\\n
    > search[sulfate free shampoo]\\nInstruction:\\ni need ...\\nBack to Search\\nPage 1 (Total results: 50)\\n...

Departures from verl-agent's WebShop prompt: no <think>/<action> tags, unquoted parts and no separate list of
admissible actions (the page's buttons are the clickables), and no history window (the episode stays in context).
"""

from __future__ import annotations

from agents.formats.household_agent import CommandLineAgent

SEP = " [SEP] "
WEBSHOP_SYSTEM_PROMPT = ("Shop for the product in the instruction. Reply with one action per line: "
                         "search[query] or click[button].")


def instruction_of(obs: str) -> str:
    """The instruction text of a page ("" when the page shows none)."""
    parts = obs.strip().split(SEP)
    i = parts.index("Instruction:") if "Instruction:" in parts else len(parts)
    return parts[i + 1] if i + 1 < len(parts) else ""


class WebShopAgent(CommandLineAgent):
    """WebShop-style shop: the instruction as the task, the env's pages as observations."""

    system_prompt = WEBSHOP_SYSTEM_PROMPT
    max_obs_chars = 1600  # results pages reach ~1,200 characters; sub-pages (descriptions) are cut

    def task_text(self, first_obs: str) -> str:
        instruction = instruction_of(first_obs)
        if not instruction:
            raise ValueError("WebShopAgent: the first observation has no 'Instruction: [SEP] ...' part; "
                             f"use the env's `text` observation mode (got {first_obs[:80]!r})")
        return "Instruction: " + instruction

    def view(self, obs: str) -> str:
        return "\n".join(obs.strip().split(SEP))
