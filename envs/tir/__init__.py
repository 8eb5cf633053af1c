"""Tool-integrated-reasoning math: task generator, problems from dataset files, grading, TIR styles, the env and
its scripted expert; and the single-turn env without the tool on the same problems."""

from envs.tir.env import TIRMathEnv
from envs.tir.expert import expert_turns
from envs.tir.grading import extract_boxed, grade
from envs.tir.problems import ProblemSource
from envs.tir.single_turn import MathEnv
from envs.tir.styles import STYLES, get_style
from envs.tir.tasks import TASK_TYPES, TIRTask, generate_task

__all__ = ["STYLES", "TASK_TYPES", "MathEnv", "ProblemSource", "TIRMathEnv", "TIRTask", "expert_turns", "extract_boxed",
           "generate_task", "get_style", "grade"]
