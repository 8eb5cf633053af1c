"""`alprl serve`: the policy endpoint outside training, as a user meets it: the real CLI in a subprocess on a model
directory, the real `openai` SDK as the agent (written from `alprl serve --help` alone), and the token record on disk.

The model is the tiny Qwen2 memorizing one hermes tool call of a tool the request declares (`get_weather`), so the
reply is known; the engine is the transformers one (the CLI's --engine hf), which starts in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from agents.endpoint.chat import canonical, render_chat
from agents.endpoint.harness import load_harness
from agents.models import load_model_and_tokenizer, save_pretrained
from trainer.setup.build import build_config
from trainer.sft.train import train_on_sequences

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


@pytest.fixture(scope="module")
def weather_model(tiny_model_dir, tmp_path_factory) -> Path:
    """A model directory whose policy answers QUESTION (with TOOLS) with CALL and the end of its turn."""
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    prompt = render_chat(tok, canonical(QUESTION), TOOLS, False, True)
    reply = tok.encode(CALL, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    cfg = build_config(None, ["sft.epochs=150", "sft.batch_size=1", "sft.lr=2e-2"])
    losses = train_on_sequences(model, [(prompt + reply, [0] * len(prompt) + [1] * len(reply))], cfg,
                                tok.pad_token_id, show_progress=False)
    assert losses[-1] < 0.01, f"the weather caller did not memorize its call (loss {losses[-1]:.3f})"
    return save_pretrained(model, tok, tmp_path_factory.mktemp("weather") / "model")


def _serve(model: Path, record: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "app.cli", "serve", "--model", str(model), "--record", str(record), "--port", "0",
           "--engine", "hf", "env.style=hermes", "rollout.max_new_tokens=160", "rollout.max_response_tokens=900"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # the banner, once the endpoint accepts connections
    if " on http://" not in line:
        proc.kill()
        raise AssertionError(f"alprl serve did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, line.split(" on ", 1)[1].split(" ", 1)[0]


def test_an_openai_agent_gets_its_own_tool_name_back_and_leaves_a_token_record(weather_model, tmp_path):
    record = tmp_path / "record"
    proc, base_url = _serve(weather_model, record)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="episode-7", max_retries=0)  # the key names the episode
        first = client.chat.completions.create(model="alprl-policy", messages=QUESTION, tools=TOOLS,
                                               extra_body={"return_token_ids": True})
        assert first.choices[0].message.tool_calls, first.choices[0].message.content
        (call,) = first.choices[0].message.tool_calls
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        history = [*QUESTION, first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
        stream = client.chat.completions.create(model="alprl-policy", messages=history, tools=TOOLS, stream=True,
                                                extra_body={"return_token_ids": True})
        chunks = list(stream)
        streamed_ids = chunks[0].choices[0].model_extra["token_ids"]
        assert chunks[0].model_extra["prompt_token_ids"][: len(first.model_extra["prompt_token_ids"])] == \
            first.model_extra["prompt_token_ids"]  # the second call extends the first: one trace
        other = openai.OpenAI(base_url=base_url, api_key="episode-8", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="temperature"):  # the run's sampling, or a 400
            other.chat.completions.create(model="alprl-policy", messages=QUESTION, temperature=0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "2 episode(s) recorded" in out
    calls = [json.loads(line) for line in (record / "calls.jsonl").read_text().splitlines()]
    assert [c["episode_id"] for c in calls] == ["episode-7", "episode-7"]
    assert calls[0]["completion_ids"] == first.choices[0].model_extra["token_ids"]
    assert calls[1]["completion_ids"] == streamed_ids
    episode, refused = [json.loads(line) for line in (record / "episodes.jsonl").read_text().splitlines()]
    assert refused["episode_id"] == "episode-8" and refused["failure"] == "harness_error"  # as training marks it
    assert episode["episode_id"] == "episode-7" and episode["turns"] == 2 and episode["prefix_breaks"] == 0
    assert episode["failure"] is None
    (trace,) = episode["traces"]
    assert trace["prompt_ids"] == calls[0]["prompt_ids"]
    sampled = [t for t, m in zip(trace["response_ids"], trace["loss_mask"], strict=True) if m]
    assert sampled == calls[0]["completion_ids"] + calls[1]["completion_ids"]  # mask 1 exactly on sampled ids
    assert [lp for lp, m in zip(trace["rollout_logprobs"], trace["loss_mask"], strict=True) if m] == \
        calls[0]["logprobs"] + calls[1]["logprobs"]
    assert trace["prompt_ids"] + trace["response_ids"][: len(calls[1]["prompt_ids"]) - len(trace["prompt_ids"])] == \
        calls[1]["prompt_ids"]


def test_serve_refuses_a_bad_override_in_one_line(weather_model):
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--model", str(weather_model),
                           "rollout.temprature=0.5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("alprl serve: error:") and "rollout.temprature" in line


def test_a_harness_module_in_the_working_directory_loads(tmp_path, monkeypatch):
    (tmp_path / "my_weather_harness.py").write_text("async def play(task, base_url, api_key):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)
    # a console script's sys.path starts at its bin directory: neither the working directory nor ""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), os.getcwd())])
    fn = load_harness("my_weather_harness:play")
    assert fn.__name__ == "play" and sys.path[-1] == str(tmp_path)
