"""alprl's text environments served as OpenEnv environments (`alprl env serve household --port N`), so OpenEnv
clients (openenv-core's `GenericEnvClient`, TRL's `environment_factory` tools built on one) play them.

How openenv-core 0.3 serves an environment, and what this module gives it:
- `create_fastapi_app(factory, action_cls, observation_cls, max_concurrent_envs=N)` builds the FastAPI app: a
  WebSocket `/ws` where each connection is one session with its own environment from `factory()`
  (messages `{"type": "reset", "data": {seed, episode_id, ...}}`, `{"type": "step", "data": <action>}`,
  `{"type": "state"}`, `{"type": "close"}`; answers `{"type": "observation", "data": {observation, reward,
  done}}` or `{"type": "error", "data": {message, code}}`), plus `/schema`, `/health`, `/metadata`, and HTTP
  `/reset` and `/step` that build a fresh environment per request (so only the WebSocket plays an episode).
  More than one session needs the environment class to declare `SUPPORTS_CONCURRENT_SESSIONS`.
- The reset message's data reaches `Environment.reset(seed, episode_id, **kwargs)` as keyword arguments; the
  step's data is validated into `action_cls` (a validation failure answers code VALIDATION_ERROR). Observations
  go out as `serialize_observation` writes them: every field except `reward`, `done` and `metadata` under
  `observation`, with `reward` and `done` beside it. `metadata` never reaches the client.

The wire format of a served alprl env:
- action `TextAction {"message": str}`: the command or assistant turn, passed to the Gymnasium env's `step`;
- observation `TextObservation {"text": str, "info": {...}, "truncated": bool}` with `reward` (float; None at
  reset) and `done`: `text` is the env's observation, `info` its info dict made JSON-safe (admissible_commands,
  won, task_score, task_id, ...), `done = terminated or truncated`, and `truncated` tells which (OpenEnv has one
  `done` flag; alprl/OpenEnv-v0 reads `truncated` back, other clients can ignore it);
- reset keywords other than `seed` and `episode_id` are the Gymnasium reset options (`split`, `index`,
  `task_id`, `task_type`), so `reset(seed=3, split="test", index=4)` plays alprl's test task 4 with seed 3.

Each session builds its own Gymnasium env, so sessions share nothing and the environment declares concurrent
sessions (`max_sessions` caps them). The served env is the raw env: no agent wrapper (the household's step
context) and no action projection, which are alprl agent formatting; a client brings its own prompt.
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, WebSocketDisconnect
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field

import envs  # noqa: F401  (registers the alprl/* ids)

SERVABLE = {"tir": "alprl/TIRMath-v0", "household": "alprl/Household-v0", "shop": "alprl/WebShop-v0"}
"""The names `alprl env serve` takes, and the env each serves."""


class TextAction(Action):
    """One command (household, shop) or assistant turn (TIR), as the model wrote it."""

    message: str = Field(..., description="The text action passed to the environment's step")


class TextObservation(Observation):
    """The env's observation text and info; `reward` and `done` (terminated or truncated) come from the base."""

    text: str = Field(default="", description="The environment's text observation")
    info: dict[str, Any] = Field(default_factory=dict, description="The Gymnasium info dict, JSON-safe")
    truncated: bool = Field(default=False, description="The episode ended by a limit, not by the task")


def json_safe(info: dict[str, Any]) -> dict[str, Any]:
    """`info` as plain JSON values (numpy numbers, tuples and other objects become what JSON holds), so the
    server's serializer never meets a type it cannot write."""
    return json.loads(json.dumps(info, default=str))


class GymTextEnvironment(Environment[TextAction, TextObservation, State]):
    """An alprl Gymnasium text env behind openenv-core's `Environment` interface (one per session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its own Gymnasium env

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        super().__init__()
        self.env_id = env_id
        self._env = gym.make(env_id, **(env_kwargs or {})).unwrapped  # alprl envs enforce their own step limits
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> TextObservation:
        """Gymnasium's reset; keywords other than seed and episode_id are its options."""
        text, info = self._env.reset(seed=seed, options=options or None)
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                            task_id=str(info.get("task_id", "")))
        return TextObservation(text=text, info=json_safe(info), reward=None, done=False)  # no reward before a step

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        text, reward, terminated, truncated, info = self._env.step(action.message)
        self._state.step_count += 1
        return TextObservation(text=text, info=json_safe(info), reward=float(reward),
                               done=bool(terminated or truncated), truncated=bool(truncated and not terminated))

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self._env).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(name=self.env_id, description=doc[0] if doc else self.env_id, version="v0")

    def close(self) -> None:
        self._env.close()


class QuietClientClose:
    """ASGI middleware: a WebSocket the client closed before the server's own close is a finished session.

    openenv-core's client sends its close message and shuts the socket at once; the server then closes a socket
    that is gone, and uvicorn would log that as an application error for every session a client ends."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def build_app(name: str, env_kwargs: dict[str, Any] | None = None, max_sessions: int = 64) -> FastAPI:
    """openenv-core's FastAPI app serving `SERVABLE[name]` (or an alprl env id), built with `env_kwargs`."""
    env_id = SERVABLE.get(name, name)
    if env_id not in gym.registry or not env_id.startswith("alprl/"):
        raise ValueError(f"cannot serve {name!r}: choose one of {', '.join(SERVABLE)} (or an alprl env id)")
    factory = functools.partial(GymTextEnvironment, env_id, dict(env_kwargs or {}))
    factory().close()  # a bad keyword fails here, once, instead of in every session
    app = create_fastapi_app(factory, TextAction, TextObservation, max_concurrent_envs=max_sessions)
    app.add_middleware(QuietClientClose)
    return app
