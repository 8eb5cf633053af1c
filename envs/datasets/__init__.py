"""Local math datasets (MATH500, AIME, Minerva, OlympiadBench, DAPO / verl parquet) as `MathProblem` lists, and
reasoning-gym's procedural datasets as a source of their own (`reasoning_gym:<name>,...`)."""

from envs.datasets.answers import normalize_answer
from envs.datasets.files import DatasetError, fingerprint
from envs.datasets.gradability import ungradable_reason
from envs.datasets.layouts import LAYOUT_NAMES, LAYOUTS, detect_layout
from envs.datasets.loader import MathProblem, load_dataset
from envs.datasets.sources import source_fingerprint, source_location

__all__ = ["LAYOUTS", "LAYOUT_NAMES", "DatasetError", "MathProblem", "detect_layout", "fingerprint", "load_dataset",
           "normalize_answer", "source_fingerprint", "source_location", "ungradable_reason"]
