"""`alprl/OpenEnv-v0`: any OpenEnv environment server, played with text actions, so alprl trains and evaluates on it.

OpenEnv (openenv-core 0.3) serves an environment over a WebSocket `/ws`: one connection is one session with its
own environment; `reset` and `step` messages answer `{observation: {...fields}, reward: float | None, done: bool}`
(the envs/adapters/openenv_server.py docstring has the whole protocol). This adapter talks through openenv-core's
own client (`GenericEnvClient(...).sync()`, which keeps the session on a background event loop), one session per
Gymnasium env, kept across episodes.

Text in, text out:
- The model's text goes into one field of the server's action (`action_field`). Empty: read the action's JSON
  schema from the server's `/schema` and take its one required string field, else `message` (the field OpenEnv's
  text environments, echo and TextArena among them, use). An action that also requires a field text cannot fill
  is refused at creation. A non-`str` action is sent as "", a lone surrogate as U+FFFD.
- The observation the model sees is one field of the server's observation (`observation_field`). Empty: the
  observation schema's one string field (echo's `echoed_message`, alprl's `text`), else the whole observation as
  JSON with sorted keys; name the field where a server keeps its feedback in another one. Text is cut at
  `MAX_OBS_CHARS` with a marker.
- Reward: the server's (None → 0.0; a non-finite reward raises, naming the server). Reset's reward is dropped.

Episode end: OpenEnv has one `done`. It is `terminated`, unless the observation carries `truncated: true`
(alprl's servers say so when a step limit ended the episode), then `truncated`. The adapter's own `max_steps`
(50) truncates an episode the server never ends. After the end, steps are answered here: same observation, 0.0,
the same flags, `invalid_action`. An action the server's schema rejects (error code VALIDATION_ERROR) is an
invalid action: the observation stays, reward 0.0, the step counts. Any other server error raises.

Reset: `reset(seed=s, options={...})` sends `seed` and the options as the reset message's keywords (OpenEnv passes
them to the environment's `reset`, which drops those it does not take). Without a seed, one is drawn from the
env's `np_random`, so `reset(seed=s)` followed by `reset()` is reproducible as Gymnasium promises. alprl's
rollouts reset with `seed=index, options={"split", "index"}`; alprl's own servers read those, another server
decides what (if anything) they mean.

Info (every step): the observation's `info` dict when it has one (alprl's servers put the Gymnasium info there),
then for keys it lacks: admissible_commands [], won (the env ended the episode, not a limit, with a positive
total reward), task_score (the total reward once terminated, else 0.0), task_id "", task_type "",
invalid_action False. `step` is the adapter's count; `invalid_action` is also True for a step answered here.

Needs `pip install -e ".[openenv]"` and a server: `base_url` (config key `env.openenv.url`) or `$OPENENV_URL`.
Without either, or with no server answering, creating the env raises one `AdapterUnavailable` line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
from typing import Any

import gymnasium as gym
import httpx

from envs.adapters import AdapterUnavailable
from envs.unicode_text import UnicodeText, utf8_clean

log = logging.getLogger(__name__)

MAX_OBS_CHARS = 32_768
MAX_ACTION_CHARS = 65_536
CUT_MARKER = "\n[... truncated]"
DEFAULT_ACTION_FIELD = "message"
CLOSE_TIMEOUT_S = 5.0
REJECTED = "(code: VALIDATION_ERROR)"
"""How openenv-core's client words a server's refusal of an action that does not fit the action schema."""


def string_fields(schema: dict[str, Any]) -> list[str]:
    """The properties of a JSON schema whose values are strings (`str` or `str | None`), `metadata` aside."""
    out = []
    for name, prop in schema.get("properties", {}).items():
        types = [prop.get("type")] + [p.get("type") for p in prop.get("anyOf", [])]
        if name != "metadata" and "string" in types:
            out.append(name)
    return out


def pick_action_field(schema: dict[str, Any] | None, wanted: str) -> str:
    """The action field the model's text goes into (module docstring); raises AdapterUnavailable naming the action's
    fields when the wanted one is not there, none fits, or the action requires another field."""
    if schema is None:  # a server that does not publish its schema: trust the configured or the usual name
        return wanted or DEFAULT_ACTION_FIELD
    props = [p for p in schema.get("properties", {}) if p != "metadata"]
    required = [p for p in schema.get("required", []) if p != "metadata"]
    strings = string_fields(schema)
    if wanted:
        field = wanted
    elif len([p for p in required if p in strings]) == 1:
        field = next(p for p in required if p in strings)
    elif DEFAULT_ACTION_FIELD in strings or len(strings) == 1:
        field = DEFAULT_ACTION_FIELD if DEFAULT_ACTION_FIELD in strings else strings[0]
    else:
        raise AdapterUnavailable(f"alprl/OpenEnv-v0: cannot tell which action field takes the text (fields: "
                                 f"{', '.join(props) or 'none'}); set env.openenv.action_field")
    others = [p for p in required if p != field]
    if field not in props or others:
        raise AdapterUnavailable(f"alprl/OpenEnv-v0: the server's action has fields {', '.join(props)} "
                                 f"(required: {', '.join(required) or 'none'}); text fills one string field, "
                                 f"{field!r} here; set env.openenv.action_field to one that is the only required")
    return field


def pick_observation_field(schema: dict[str, Any] | None, wanted: str) -> str:
    """The observation field the model sees ("" : the whole observation as JSON)."""
    if wanted or schema is None:
        return wanted
    strings = string_fields(schema)
    return strings[0] if len(strings) == 1 else ""


def observation_text(fields: dict[str, Any], field: str) -> str:
    """The text of one observation: `field`'s value (JSON unless a string), or every field as JSON; clean UTF-8,
    cut at MAX_OBS_CHARS."""
    if field:
        if field not in fields:
            raise RuntimeError(f"alprl/OpenEnv-v0: the observation has no field {field!r} (fields: "
                               f"{', '.join(fields)}); set env.openenv.observation_field")
        value = fields[field]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    else:
        text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    text = utf8_clean(text)
    return text if len(text) <= MAX_OBS_CHARS else text[: MAX_OBS_CHARS - len(CUT_MARKER)] + CUT_MARKER


def finite_reward(value: Any, url: str) -> float:
    """The server's reward as a finite float (None: 0.0)."""
    reward = 0.0 if value is None else float(value)
    if not math.isfinite(reward):
        raise RuntimeError(f"the OpenEnv server at {url} sent a non-finite reward ({value!r})")
    return reward


def http_url(url: str) -> str:
    """The HTTP address of a server given as http(s):// or ws(s)://."""
    url = url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws):]
    return url if "://" in url else "http://" + url


def read_schema(url: str, timeout_s: float) -> dict[str, Any] | None:
    """The server's `/schema` ({action, observation, state} JSON schemas), None where it publishes none."""
    try:
        response = httpx.get(http_url(url) + "/schema", timeout=timeout_s)
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None


@functools.cache
def client_class() -> type:
    """openenv-core's `GenericEnvClient` with a close that lets the server end the session first.

    Its own `close` sends the close message and shuts the socket at once; the server, done destroying the session,
    then closes a socket that is gone and logs a traceback for every episode's env. Waiting for the server's close
    frame ends both sides cleanly."""
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError as exc:
        raise AdapterUnavailable("alprl/OpenEnv-v0 needs openenv-core: pip install -e \".[openenv]\"") from exc

    class Client(GenericEnvClient):
        async def end_session(self, timeout_s: float) -> None:
            """Ask the server to end the session and wait (at most `timeout_s`) until it closes the socket."""
            if self._ws is not None:
                await self._ws.send(json.dumps({"type": "close"}))
                await asyncio.wait_for(self._ws.wait_closed(), timeout_s)

    return Client


def connect(url: str, connect_timeout_s: float, message_timeout_s: float) -> Any:
    """A connected openenv-core sync client (its own session on the server)."""
    client = client_class()(base_url=url, connect_timeout_s=connect_timeout_s,
                            message_timeout_s=message_timeout_s).sync()
    try:
        client.connect()
    except ConnectionError as exc:
        client.close()
        raise AdapterUnavailable(f"alprl/OpenEnv-v0: no OpenEnv server answers at {url} ({exc}); start one or fix "
                                 "env.openenv.url") from exc
    return client


class OpenEnvTextEnv(gym.Env[str, str]):
    """An OpenEnv environment server played with text (see the module docstring).

    ## Observation
    `UnicodeText(32768)`: the observation field the model sees (or the observation as JSON), cut with a marker.

    ## Action
    `UnicodeText(65536)`: any `str`, sent in the server's action field.

    ## Reward
    The server's, as a finite float (None → 0.0).

    ## Episode End
    The server's `done`: terminated, or truncated where the observation says `truncated: true`; `max_steps`
    steps truncate.

    ## Arguments
    - `base_url`: the server (http://HOST:PORT or ws://...; None: `$OPENENV_URL`).
    - `action_field`, `observation_field`: which fields carry the text ("": chosen from the server's schema).
    - `max_steps`: the adapter's own step limit (50).
    - `connect_timeout_s`, `message_timeout_s`: openenv-core's client timeouts (10 s, 60 s per message).
    - `render_mode`: None or "ansi".
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, base_url: str | None = None, action_field: str = "",
                 observation_field: str = "", max_steps: int = 50, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 60.0) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: OpenEnvTextEnv supports None or 'ansi'")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        url = base_url or os.environ.get("OPENENV_URL", "")
        if not url:
            raise AdapterUnavailable("alprl/OpenEnv-v0 needs an OpenEnv server: set env.openenv.url=http://HOST:PORT "
                                     "or OPENENV_URL")
        self.render_mode, self.url, self.max_steps = render_mode, url, max_steps
        self.observation_space = UnicodeText(MAX_OBS_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self._client = None
        self._client = connect(url, connect_timeout_s, message_timeout_s)
        schema = read_schema(url, connect_timeout_s)
        try:
            self.action_field = pick_action_field(schema and schema.get("action"), action_field)
        except AdapterUnavailable:
            self.close()
            raise
        self.observation_field = pick_observation_field(schema and schema.get("observation"), observation_field)
        self._obs, self._served_info, self._served_truncated = "", {}, False
        self._started, self._steps, self._return = False, 0, 0.0
        self._terminated = self._truncated = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if self._client is None:
            raise RuntimeError("OpenEnvTextEnv.reset after close")
        served_seed = seed if seed is not None else int(self.np_random.integers(2**31 - 1))
        result = self._client.reset(**{**(options or {}), "seed": served_seed})
        self._steps, self._return, self._started = 0, 0.0, True
        self._terminated = self._truncated = False
        self._take(result.observation)
        return self._obs, self._info(invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not self._started or self._client is None:
            raise RuntimeError("OpenEnvTextEnv.step before reset (or after close); call env.reset() first")
        if self._terminated or self._truncated:  # after the end: nothing changes, nothing is paid
            return self._obs, 0.0, self._terminated, self._truncated, self._info(invalid=True)
        self._steps += 1
        text = utf8_clean(action) if isinstance(action, str) else ""
        try:
            result = self._client.step({self.action_field: text})
        except RuntimeError as exc:
            if REJECTED not in str(exc):
                raise RuntimeError(f"the OpenEnv server at {self.url} failed a step: {exc}") from exc
            result = None  # the server's schema refused the text: an invalid action
        reward = 0.0
        if result is not None:
            reward = finite_reward(result.reward, self.url)
            self._return += reward
            self._take(result.observation)
            self._truncated = bool(result.done) and self._served_truncated
            self._terminated = bool(result.done) and not self._truncated
        if not self._terminated and self._steps >= self.max_steps:
            self._truncated = True
        return self._obs, reward, self._terminated, self._truncated, self._info(invalid=result is None)

    def _take(self, fields: dict[str, Any]) -> None:
        """Keep one observation's text, its `info` dict and whether it says a limit ended the episode."""
        self._obs = observation_text(fields, self.observation_field)
        served = fields.get("info")
        self._served_info = dict(served) if isinstance(served, dict) else {}
        self._served_truncated = fields.get("truncated") is True

    def _info(self, invalid: bool) -> dict[str, Any]:
        """`invalid`: the step was answered here (after the end, or refused by the schema)."""
        won = self._terminated and self._return > 0
        defaults = {"admissible_commands": [], "won": won, "task_score": self._return if self._terminated else 0.0,
                    "task_id": "", "task_type": "", "invalid_action": False}
        info = defaults | self._served_info | {"step": self._steps}
        info["invalid_action"] = invalid or bool(info["invalid_action"])
        return info

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.end_session(CLOSE_TIMEOUT_S)
            except Exception as exc:  # a server that is gone has no session left to end
                log.debug("OpenEnvTextEnv.close: the session at %s did not end cleanly: %s", self.url, exc)
            try:
                client.close()
            except Exception as exc:  # closing must not fail: a server that is gone has no session left to close
                log.warning("OpenEnvTextEnv.close: the session at %s did not close cleanly: %s", self.url, exc)
