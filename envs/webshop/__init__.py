"""WebShop-style shopping environment (`alprl/WebShop-v0`): procedural catalog, BM25 search, WebShop's reward.

Public API: `WebShopEnv`, `expert_action` (oracle / imperfect expert, see envs.webshop.expert), `get_catalog`.
"""

from .catalog import get_catalog
from .env import WebShopEnv
from .expert import expert_action

__all__ = ["WebShopEnv", "expert_action", "get_catalog"]
