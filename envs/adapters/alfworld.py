"""`alprl/ALFWorld-v0`: the real ALFWorld (TextWorld playing ALFWorld's game files) with alprl/Household-v0's
interface, so the household agent and a model trained on the generated household run on it unchanged.

Needs `pip install alfworld` (it brings `textworld[pddl]`) and ALFWorld's game files (`alfworld-download`), found
under `data_path` or `$ALFWORLD_DATA`. Without either, creating the env raises one `AdapterUnavailable` line.

Splits follow ALFWorld's loaders: train = json_2.1.1/train, valid = valid_seen (in distribution), test =
valid_unseen (out of distribution, the split ALFWorld results are usually reported on). The games of a split are
the ones ALFWorld's own `AlfredTWEnv.collect_game_files` keeps (a traj_data.json beside a game.tw-pddl marked
solvable; movable and sliced trajectories skipped), sorted by path, so task_id k names the same game on every
machine; train task ids wrap around the split's game count (RL draws train ids from a large range).

Each reset starts the chosen game with ALFWorld's own wrappers (`AlfredDemangler`, no shuffling: object names as
the game defines them; `AlfredInfos`), asking TextWorld for `won` and `admissible_commands`, as `AlfredTWEnv` does.
Reward 1.0 on the step that wins, else 0.0; `max_steps` (50, ALFWorld's evaluation limit) truncates.
"""

from __future__ import annotations

import json
import os
import string
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envs.adapters import AdapterUnavailable
from envs.splits import check_split, task_id_of_index

SPLIT_DIRS = {"train": "train", "valid": "valid_seen", "test": "valid_unseen"}
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
MAX_TEXT = 16_384
CHARSET = frozenset(string.printable)


# TextWorld parses PDDL with tatsu, whose parser state is not thread-safe: games stepped from the rollout's env-step
# threads failed inside tatsu (IndexError: pop from empty list). Every TextWorld call takes this lock; a step
# takes milliseconds, so the serialization costs little next to sampling.
TEXTWORLD_LOCK = threading.Lock()


class Game:
    """One game being played: what the adapter needs of TextWorld's environment."""

    def __init__(self, tw_env: Any):
        self._tw = tw_env

    def reset(self) -> tuple[str, list[str], bool]:
        """(feedback, admissible commands, won)."""
        with TEXTWORLD_LOCK:
            return self._unpack(self._tw.reset())

    def step(self, command: str) -> tuple[str, list[str], bool]:
        with TEXTWORLD_LOCK:
            state, _, _ = self._tw.step(command)
        return self._unpack(state)

    def close(self) -> None:
        with TEXTWORLD_LOCK:
            self._tw.close()

    @staticmethod
    def _unpack(state: Any) -> tuple[str, list[str], bool]:
        return str(state["feedback"]), list(state["admissible_commands"]), bool(state["won"])


def require_alfworld() -> None:
    """Raise AdapterUnavailable unless the alfworld package (and its textworld) import."""
    try:
        import textworld  # noqa: F401
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler  # noqa: F401
    except ImportError as exc:
        raise AdapterUnavailable(
            f"alprl/ALFWorld-v0 needs the alfworld package ({exc.name} is not importable): "
            "`pip install alfworld`, then `alfworld-download` for the game files") from exc


def start_textworld_game(game_file: str) -> Game:
    """Start `game_file` as ALFWorld's `AlfredTWEnv.init_env` does (its wrappers and requested infos)."""
    require_alfworld()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    with TEXTWORLD_LOCK:
        return Game(textworld.start(game_file, request_infos=infos, wrappers=[AlfredDemangler, AlfredInfos]))


def collect_games(split_dir: Path, task_types: tuple[str, ...]) -> list[tuple[str, str]]:
    """(game file, task type) of the playable games under `split_dir`, by ALFWorld's rules, sorted by path."""
    games = []
    for traj in sorted(split_dir.rglob("traj_data.json")):
        root = traj.parent
        game_file = root / "game.tw-pddl"
        if "movable" in str(root) or "Sliced" in str(root) or not game_file.exists():
            continue
        task_type = json.loads(traj.read_text()).get("task_type", "")
        if task_type in task_types and json.loads(game_file.read_text()).get("solvable", False):
            games.append((str(game_file), task_type))
    return games


class ALFWorldEnv(gym.Env[str, str]):
    """The real ALFWorld behind alprl/Household-v0's interface (see the module docstring).

    `reset(seed=..., options={"task_id": k, "task_type": t, "split": s})`; info keys (every step):
    admissible_commands, won, task_score, task_id, task_type, step, invalid_action, gamefile.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, data_path: str | None = None, split: str = "train",
                 task_types: list[str] | None = None, max_steps: int = 50,
                 start_game: Callable[[str], Game] | None = None) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: ALFWorldEnv supports None or 'ansi'")
        unknown = sorted(set(task_types or ()) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"task_types {unknown} are not ALFWorld task types; valid: {list(TASK_TYPES)}")
        if start_game is None:  # TextWorld playing the game files (another `start_game` plays them otherwise)
            require_alfworld()
        root = data_path or os.environ.get("ALFWORLD_DATA", "")
        if not root:
            raise AdapterUnavailable("alprl/ALFWorld-v0 needs ALFWorld's game files: run `alfworld-download` "
                                     "and set ALFWORLD_DATA (or env.alfworld_data=PATH)")
        self.data_dir = Path(root).expanduser() / "json_2.1.1"
        if not self.data_dir.is_dir():
            raise AdapterUnavailable(f"alprl/ALFWorld-v0: no {self.data_dir}; point ALFWORLD_DATA (or "
                                     "env.alfworld_data) at the folder `alfworld-download` filled")
        self.render_mode, self.split, self.max_steps = render_mode, check_split(split), max_steps
        self.task_types = tuple(task_types or TASK_TYPES)
        self.observation_space = spaces.Text(MAX_TEXT, min_length=0, charset=string.printable)
        self.action_space = spaces.Text(MAX_TEXT, min_length=0, charset=string.printable)
        self._start_game = start_game or start_textworld_game
        self._games: dict[str, list[tuple[str, str]]] = {}
        self._game: Game | None = None
        self._obs, self._task_id, self._task_type, self._game_file = "", "", "", ""
        self._admissible: list[str] = []
        self._steps, self._won = 0, False

    def games(self, split: str) -> list[tuple[str, str]]:
        """The playable games of `split` (collected once per split)."""
        if split not in self._games:
            self._games[split] = collect_games(self.data_dir / SPLIT_DIRS[split], self.task_types)
            if not self._games[split]:
                raise AdapterUnavailable(f"alprl/ALFWorld-v0: no playable {'/'.join(self.task_types)} game under "
                                         f"{self.data_dir / SPLIT_DIRS[split]}")
        return self._games[split]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "task_type", "split", "index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; valid: task_id, task_type, split, index")
        split = check_split(options.get("split", self.split))
        if "index" in options and "task_id" not in options:  # the global-index form every alprl env accepts
            options["task_id"] = task_id_of_index(split, options["index"])
        games = self.games(split)
        if options.get("task_type") is not None:
            games = [g for g in games if g[1] == options["task_type"]]
            if not games:
                raise ValueError(f"options['task_type']={options['task_type']!r}: no such game in split {split}")
        task_id = options.get("task_id")
        if task_id is None:
            task_id = int(self.np_random.integers(len(games)))
        elif split != "train" and not 0 <= task_id < len(games):
            raise ValueError(f"task_id={task_id}: split {split} has {len(games)} games (0-{len(games) - 1})")
        self._game_file, self._task_type = games[task_id % len(games)]
        self._task_id = f"{split}-{task_id % len(games)}"
        if self._game is not None:
            self._game.close()
        self._game = self._start_game(self._game_file)
        self._obs, self._admissible, self._won = self._game.reset()
        self._steps = 0
        return self._obs, self._info(invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._game is None:
            raise RuntimeError("ALFWorldEnv.step before reset; call env.reset() first")
        command = "".join(c for c in action if c in CHARSET).strip() if isinstance(action, str) else ""
        if self._won or self._steps >= self.max_steps:  # after the end: nothing changes, nothing is paid
            return self._obs, 0.0, self._won, not self._won, self._info(invalid=True)
        invalid = command not in self._admissible
        self._steps += 1
        if invalid:  # ALFWorld's answer to any command outside the admissible set; the game is not asked
            self._obs, won = "Nothing happens.", self._won
        else:
            self._obs, self._admissible, won = self._game.step(command)
        reward = 1.0 if won and not self._won else 0.0
        self._won = won
        truncated = not won and self._steps >= self.max_steps
        return self._obs, reward, won, truncated, self._info(invalid=invalid)

    def _info(self, invalid: bool) -> dict[str, Any]:
        return {"admissible_commands": list(self._admissible), "won": self._won,
                "task_score": 1.0 if self._won else 0.0, "task_id": self._task_id, "task_type": self._task_type,
                "step": self._steps, "invalid_action": invalid, "gamefile": self._game_file}

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None
