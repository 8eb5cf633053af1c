"""`alprl/BFCL-v0`: BFCL's multi-turn categories (base, miss_func, miss_param, long_context) on the `bfcl-eval`
package's own data, API simulators and multi-turn checker, unchanged (envs/bfcl/env.py)."""

from .calls import call_string, hermes_text, parse_calls
from .data import CATEGORIES, BFCLUnavailable, entries, ground_truth, openai_tools
from .env import BFCLEnv

__all__ = ["BFCLEnv", "BFCLUnavailable", "CATEGORIES", "call_string", "entries", "ground_truth", "hermes_text",
           "openai_tools", "parse_calls"]
