"""The `env.openenv` section: which OpenEnv server `alprl/OpenEnv-v0` plays and which fields carry the text
(envs/adapters/openenv_client.py says how empty fields are chosen from the server's schema)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OpenEnvConfig:
    url: str = ""
    """alprl/OpenEnv-v0: the OpenEnv server's address, http://HOST:PORT or ws://HOST:PORT (empty: $OPENENV_URL);
    `alprl env serve` serves alprl's own envs at one."""
    action_field: str = ""
    """The action field the model's text goes into (empty: the action schema's one required string field, else
    `message`)."""
    observation_field: str = ""
    """The observation field the model sees (empty: the observation schema's one string field, else the whole
    observation as JSON)."""
