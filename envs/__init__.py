"""alprl text environments, registered with Gymnasium on import (reference/environments.md §0.5).

`import envs` (or `gym.make("envs:alprl/TIRMath-v0")`) registers every `alprl/*` id. Each env enforces its own
step limit, so registration uses `max_episode_steps=None` (no TimeLimit counting twice).
"""

from gymnasium.envs.registration import register, registry


def _register(env_id: str, entry_point: str) -> None:
    if env_id not in registry:  # re-importing must not warn about overriding
        register(id=env_id, entry_point=entry_point, max_episode_steps=None, nondeterministic=False)


_register("alprl/TIRMath-v0", "envs.tir.env:TIRMathEnv")

# ---- Household / WebShop registrations (owned by the household/webshop engineer) ----
_register("alprl/Household-v0", "envs.household:HouseholdEnv")
_register("alprl/WebShop-v0", "envs.webshop:WebShopEnv")
# ---- end of Household / WebShop registrations ----
