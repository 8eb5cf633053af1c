"""ALFWorld-style household environment (`alprl/Household-v0`), its generator and experts.

Public API: `HouseholdEnv`, `expert_action` (oracle / imperfect expert, see envs.household.expert), `TASK_TYPES`.
"""

from .env import HouseholdEnv
from .expert import expert_action
from .vocab import TASK_TYPES

__all__ = ["HouseholdEnv", "TASK_TYPES", "expert_action"]
