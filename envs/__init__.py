"""alprl text environments, registered with Gymnasium on import (reference/environments.md §0.5).

`import envs` (or `gym.make("envs:alprl/TIRMath-v0")`) registers every `alprl/*` id. Each env enforces its own
step limit, so registration uses `max_episode_steps=None` (no TimeLimit counting twice).
"""

from gymnasium.envs.registration import register, registry


def _register(env_id: str, entry_point: str) -> None:
    if env_id not in registry:  # re-importing must not warn about overriding
        register(id=env_id, entry_point=entry_point, max_episode_steps=None, nondeterministic=False)


_register("alprl/TIRMath-v0", "envs.tir.env:TIRMathEnv")
_register("alprl/Math-v0", "envs.tir.single_turn:MathEnv")  # the same problems, one turn, no tool

# ---- Household / WebShop registrations (owned by the household/webshop engineer) ----
_register("alprl/Household-v0", "envs.household:HouseholdEnv")
_register("alprl/WebShop-v0", "envs.webshop:WebShopEnv")
# ---- end of Household / WebShop registrations ----

# BFCL's multi-turn categories on the bfcl-eval package's data, simulators and checker (envs/bfcl/)
_register("alprl/BFCL-v0", "envs.bfcl:BFCLEnv")

# Adapters to the real environments (envs/adapters/): they need what cannot be fetched here (the `alfworld` package
# and its game files; a running WebShop server), so creating one without it raises AdapterUnavailable.
_register("alprl/ALFWorld-v0", "envs.adapters.alfworld:ALFWorldEnv")
_register("alprl/WebShopServer-v0", "envs.adapters.webshop_server:WebShopServerEnv")
# Any OpenEnv environment server, played with text (envs/adapters/openenv_client.py); it needs the `openenv` extra
# and a running server. `alprl env serve` serves alprl's own envs the other way (envs/adapters/openenv_server.py).
_register("alprl/OpenEnv-v0", "envs.adapters.openenv_client:OpenEnvTextEnv")

ADAPTER_TWINS = {"alprl/ALFWorld-v0": "alprl/Household-v0", "alprl/WebShopServer-v0": "alprl/WebShop-v0"}
"""Each adapter's generated twin: same observation text, action grammar and info keys, so the twin's agent (and a
model trained on the twin) runs on the adapter unchanged."""


def generated_twin(env_id: str) -> str:
    """The generated env whose agent, wrappers and task indexing `env_id` uses (itself unless it is an adapter)."""
    return ADAPTER_TWINS.get(env_id, env_id)
