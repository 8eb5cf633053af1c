"""`alprl serve`: the policy endpoint outside training, to develop and check an agent harness before a run.

    alprl serve --model DIR [--record DIR] [--port 8000] [key=value ...]

The same OpenAI-compatible endpoint `rollout.source=harness` serves during training (agents/endpoint/), on the
model in DIR with the run's sampling and budgets, and with the same token accounting: every call's prompt ids,
sampled ids and log-probs exactly as the engine produced them, stitched into episodes as training stitches them.
Here any episode id starts an episode (training serves only the ids it registered): a call names its episode by
the `X-Episode-Id` header, the `user` field or its API key, so a client that opens one `OpenAI(api_key=...)` per
episode needs nothing else. With --record DIR, `calls.jsonl` gets one line per call as it finishes and, when the
server stops, `episodes.jsonl` one line per episode: its traces as training would batch them (prompt ids, response
ids, loss mask, log-probs, why each trace began), which is what a harness is checked against before a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

DESCRIPTION = """The policy endpoint of `rollout.source=harness` (OpenAI's /v1/chat/completions, /v1/completions,
/v1/models) on a model of your own, outside training, recording each episode's tokens as training would: develop
and check an agent harness before a run. Any episode id starts an episode: a call names its episode by the
X-Episode-Id header, the `user` field or its API key (one OpenAI(api_key=...) client per episode needs nothing
else).

Settings: an alprl checkpoint (a directory holding alprl_config.yaml) is served as its run sampled: temperature,
top_p, top_k, tokens per call (rollout.max_new_tokens), an episode's response budget (rollout.max_response_tokens)
and the tool-call format (env.style). A plain Hugging Face model directory gets the config defaults with 4096
tokens per call and per episode. key=value overrides (run config keys) change them. Tool calls: a request's `tools`
come back as OpenAI `tool_calls` under the names it declared when the model writes them in the served format;
generic OpenAI agents want `env.style=hermes` (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the format
of Qwen's chat templates), which any function name may use; simpletir and torl parse only alprl's
`code_interpreter` tool. A request may not change the sampling (another temperature, penalties, n > 1: 400), so
what it records is what the trainer would replay."""

EPILOG = """records (--record DIR): calls.jsonl {"episode_id", "call", "prompt_ids", "completion_ids", "logprobs",
"finish_reason"} per call; episodes.jsonl {"episode_id", "turns", "prefix_breaks", "traces": [{"prompt_ids",
"response_ids", "loss_mask", "rollout_logprobs", "trace_start"}], "failure"} per episode, written at shutdown.

exit status: 0 stopped by Ctrl-C or SIGTERM after writing the records; 2 a bad option, override or model
directory, or a port in use; 3 the inference engine's process died."""

PLAIN_MODEL_BUDGET = 4096


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="the policy endpoint (OpenAI API) outside training, recording each episode's "
                       "tokens: develop a harness before a run", description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Hugging Face causal LM directory or an alprl checkpoint "
                   "(e.g. runs/demo/checkpoints/step_30)")
    p.add_argument("--record", default="", metavar="DIR", help="write calls.jsonl and episodes.jsonl here")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; "
                   "the endpoint has no authentication)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument("--served-model-name", default="alprl-policy",
                   help="the `model` a request must name (default alprl-policy)")
    p.add_argument("--engine", default=None, choices=("auto", "vllm", "hf"),
                   help="inference engine (default: the run's rollout.engine, else auto)")
    p.add_argument("--no-run-config", action="store_true", help="ignore the checkpoint's alprl_config.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="run config overrides, e.g. env.style=hermes "
                   "rollout.max_new_tokens=512")


def serve_config(args: argparse.Namespace):
    """The resolved config (engine kind resolved: auto → vllm or hf); a ConfigError for a bad override."""
    from agents.engines import resolve_kind, vllm_only
    from app.eval_plan import model_parameters
    from trainer.config.rollout_config import engine_options
    from trainer.setup.build import build_config
    from trainer.setup.saved_config import load_run_config

    model = Path(args.model)
    overrides = list(args.overrides) + ([f"rollout.engine={args.engine}"] if args.engine else [])
    cfg = None if args.no_run_config else load_run_config(model, overrides, without_datasets=True)
    if cfg is None:
        budget = [f"rollout.max_new_tokens={PLAIN_MODEL_BUDGET}", f"rollout.max_response_tokens={PLAIN_MODEL_BUDGET}"]
        cfg = build_config(None, budget + overrides)
    kind = resolve_kind(cfg.rollout.engine, model_parameters(model),
                        vllm_only_option=vllm_only(cfg.rollout.schedule, engine_options(cfg.rollout)))
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, engine=kind))


class RecordWriter:
    """calls.jsonl, a line per call as it is recorded; episodes.jsonl at `close` (module docstring)."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._calls = (directory / "calls.jsonl").open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def call(self, episode_id: str, call) -> None:
        line = {"episode_id": episode_id, "call": call.index, "prompt_ids": call.prompt_ids,
                "completion_ids": call.completion_ids, "logprobs": call.logprobs,
                "finish_reason": call.finish_reason}
        with self._lock:
            self._calls.write(json.dumps(line) + "\n")
            self._calls.flush()

    def episodes(self, recorder) -> int:
        """Write every episode's traces; returns how many."""
        lines = []
        for ep in list(recorder.episodes.values()):
            traj = recorder.trajectory(ep, 0.0, [])
            traces = [{"prompt_ids": t.prompt_ids, "response_ids": t.response_ids, "loss_mask": t.loss_mask,
                       "rollout_logprobs": t.rollout_logprobs, "trace_start": t.info.get("trace_start", "")}
                      for t in traj.traces]
            lines.append({"episode_id": ep.episode_id, "turns": traj.info["turns"],
                          "prefix_breaks": ep.prefix_breaks, "traces": traces,
                          "failure": traj.info.get("infra_failure")})
        with (self.directory / "episodes.jsonl").open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
        return len(lines)

    def close(self) -> None:
        self._calls.close()


def recording_recorder(max_response_tokens: int, decode, writer: RecordWriter | None):
    """An open-episode Recorder that hands each recorded call to `writer` too."""
    from agents.endpoint.recorder import Recorder

    class _Recording(Recorder):
        def record(self, ep, call) -> None:
            super().record(ep, call)
            if writer is not None:
                writer.call(ep.episode_id, call)

    return _Recording(max_response_tokens, decode, open_episodes=True)


def run_serve_command(args: argparse.Namespace) -> int:
    from trainer.config.errors import ConfigError

    try:
        cfg = serve_config(args)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"alprl serve: error: {exc}", file=sys.stderr)
        return 2
    from agents.endpoint.sampler import Sampler
    from agents.endpoint.server import EndpointServer
    from agents.endpoint.service import EndpointSettings, PolicyService
    from agents.engines.base import EngineDied
    from app.eval_cli import engine_for

    r = cfg.rollout
    try:
        engine, tokenizer = engine_for(cfg, args.model)
    except (OSError, ValueError) as exc:
        print(f"alprl serve: error: {args.model}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    writer = RecordWriter(Path(args.record)) if args.record else None
    recorder = recording_recorder(r.max_response_tokens, lambda ids: tokenizer.decode(ids), writer)
    settings = EndpointSettings(r.max_new_tokens, r.max_response_tokens, model_name=args.served_model_name,
                                stop_token_ids=list(r.stop_token_ids), tool_format=cfg.env.style, seed=None,
                                temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
    service = PolicyService(tokenizer, Sampler(engine), recorder, settings, engine.max_model_len)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = EndpointServer(service, args.host, args.port).start()
    except OSError as exc:
        print(f"alprl serve: error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        engine.close()
        return 2
    print(f"alprl serve: {args.model} as `{args.served_model_name}` on {server.base_url} ({r.engine} engine, "
          f"tool format {cfg.env.style}, temperature {r.temperature}, {r.max_new_tokens} tokens a call, "
          f"{r.max_response_tokens} an episode){'; recording to ' + args.record if writer else ''}; Ctrl-C stops",
          flush=True)
    try:
        while not stop.wait(0.5):
            if service.engine_died is not None:
                raise service.engine_died
    except EngineDied as exc:
        print(f"alprl serve: error: {exc}", file=sys.stderr)
        return 3
    finally:
        server.close()
        if writer is not None:
            count = writer.episodes(recorder)
            writer.close()
            print(f"alprl serve: {count} episode(s) recorded in {args.record}", flush=True)
        engine.close()
    return 0
