"""Stand-ins for what the real-environment adapters need and this machine cannot fetch (ALFWorld's game files and
the `alfworld` package; a running WebShop server), built from the generated twins so episodes can be checked.

- ALFWorld: a data folder laid out as `alfworld-download` lays it out (json_2.1.1/<split>/<task>/<trial>/ with
  traj_data.json and game.tw-pddl), where each game file names a generated household task, and a `start_game`
  that plays it on alprl/Household-v0 (the generated twin speaks ALFWorld's text and grammar).
- ALFWorld for real, where the `alfworld` package is installed: `write_real_alfworld_game` writes one game file as
  ALFWorld's generator would (ALFWorld's own PDDL domain and grammar, a hand-written problem: a room with a
  countertop, a side table and a cabinet, the goal "put a apple in sidetable"), which TextWorld plays.
- WebShop: AgentGym's `agentenv-webshop` HTTP API (FastAPI, served by uvicorn on a loopback port), each server
  env an alprl/WebShop-v0 in text mode; a session id is WebShop's goal index (test 0-499, valid 500-1499, train
  1500+).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from envs.adapters.alfworld import Game
from envs.household import HouseholdEnv
from envs.webshop import WebShopEnv

GAMES_PER_SPLIT = 6
ALFWORLD_SPLITS = {"train": "train", "valid_seen": "valid", "valid_unseen": "test"}


def write_alfworld_data(root: Path, games_per_split: int = GAMES_PER_SPLIT) -> None:
    """Game folders for generated tasks 0..n-1 of each split, plus the kinds ALFWorld's loader skips."""
    task_types = ["pick_and_place_simple", "look_at_obj_in_light", "pick_two_obj_and_place"]
    for folder, split in ALFWORLD_SPLITS.items():
        for k in range(games_per_split):
            task_type = task_types[k % len(task_types)]
            trial = root / "json_2.1.1" / folder / f"{task_type}-Obj-None-Recep-{k:03d}" / "trial_T0"
            _write_game(trial, task_type, {"solvable": True, "alprl_split": split, "alprl_task_id": k})
        skipped = root / "json_2.1.1" / folder
        _write_game(skipped / "pick_and_place_simple-Obj-None-Recep-movable" / "trial_T0", "pick_and_place_simple",
                    {"solvable": True, "alprl_split": split, "alprl_task_id": 0})
        _write_game(skipped / "pick_and_place_simple-AppleSliced-None-Recep-900" / "trial_T0",
                    "pick_and_place_simple", {"solvable": True, "alprl_split": split, "alprl_task_id": 0})
        _write_game(skipped / "pick_and_place_simple-Obj-None-Recep-901" / "trial_T0", "pick_and_place_simple",
                    {"solvable": False, "alprl_split": split, "alprl_task_id": 0})
        missing = skipped / "pick_and_place_simple-Obj-None-Recep-902" / "trial_T0"
        missing.mkdir(parents=True)
        (missing / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))


def _write_game(trial: Path, task_type: str, game: dict[str, Any]) -> None:
    trial.mkdir(parents=True)
    (trial / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    (trial / "game.tw-pddl").write_text(json.dumps(game))


REAL_GAME_PROBLEM = """
(define (problem plan_1)
    (:domain alfred)
    (:objects
        agent1 # agent
        {apple} # object
        {counter} # receptacle
        {table} # receptacle
        {cabinet} # receptacle
        AppleType # otype
        CounterTopType # rtype
        SideTableType # rtype
        CabinetType # rtype
        {locations}
    )
    (:init
        {distances}
        (atLocation agent1 loc|0|0|0|30)
        (receptacleAtLocation {counter} loc|1|1|1|30)
        (receptacleAtLocation {table} loc|2|2|2|30)
        (receptacleAtLocation {cabinet} loc|3|3|3|30)
        (objectAtLocation {apple} loc|1|1|1|30)
        (inReceptacle {apple} {counter})
        (receptacleType {counter} CounterTopType)
        (receptacleType {table} SideTableType)
        (receptacleType {cabinet} CabinetType)
        (openable {cabinet})
        (objectType {apple} AppleType)
        (pickupable {apple})
        (canContain CounterTopType AppleType)
        (canContain SideTableType AppleType)
        (canContain CabinetType AppleType)
    )
    (:goal (and (exists (?r # receptacle) (exists (?o # object)
        (and (inReceptacle ?o ?r) (objectType ?o AppleType) (receptacleType ?r SideTableType))))))
)
"""


def write_real_alfworld_game(root: Path) -> Path:
    """One real ALFWorld game file (see the module docstring) under root/json_2.1.1/valid_unseen/; needs the
    alfworld package (its PDDL domain and grammar)."""
    import alfworld

    data = Path(alfworld.__file__).parent / "data"
    locations = [f"loc|{i}|{i}|{i}|30" for i in range(4)]
    problem = REAL_GAME_PROBLEM.format(
        apple="Apple|-01.00|+01.00|+00.50", counter="CounterTop|-01.00|+01.00|+00.00",
        table="SideTable|+02.00|+00.50|+01.00", cabinet="Cabinet|+01.00|+00.50|+02.00",
        locations="\n        ".join(f"{loc} # location" for loc in locations),
        distances=" ".join(f"(= (distance {a} {b}) 2)" for a in locations for b in locations if a != b))
    for old, new in (("-", "_minus_"), ("#", "-"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_")):
        problem = problem.replace(old, new)  # the identifier escapes of ALFWorld's generator (fix_pddl_str_chars)
    trial = root / "json_2.1.1" / "valid_unseen" / "pick_and_place_simple-Apple-None-SideTable-1" / "trial_T1"
    grammar = (data / "alfred.twl2").read_text().replace("UNKNOWN GOAL", "put a apple in sidetable")
    _write_game(trial, "pick_and_place_simple", {"pddl_domain": (data / "alfred.pddl").read_text(),
                                                 "grammar": grammar, "pddl_problem": problem, "solvable": True})
    return trial / "game.tw-pddl"


class HouseholdGame(Game):
    """A game file of `write_alfworld_data` played on the generated household (expert plan kept for tests)."""

    def __init__(self, game_file: str):
        game = json.loads(Path(game_file).read_text())
        task_type = json.loads((Path(game_file).parent / "traj_data.json").read_text())["task_type"]
        self.env = HouseholdEnv(expert=True, task_types=[task_type])
        self.options = {"split": game["alprl_split"], "task_id": game["alprl_task_id"]}
        self.plan: list[str] = []
        self.closed = False

    def reset(self) -> tuple[str, list[str], bool]:
        obs, info = self.env.reset(options=self.options)
        self.plan = info["expert_plan"]
        return obs, info["admissible_commands"], info["won"]

    def step(self, command: str) -> tuple[str, list[str], bool]:
        obs, _, _, _, info = self.env.step(command)
        self.plan = info["expert_plan"]
        return obs, info["admissible_commands"], info["won"]

    def close(self) -> None:
        self.closed = True


class StepQuery(BaseModel):
    env_idx: int
    action: str


class ResetQuery(BaseModel):
    env_idx: int
    session_id: int | None = None


class CloseQuery(BaseModel):
    env_idx: int


def webshop_app() -> FastAPI:
    """AgentGym's agentenv-webshop API over generated shops; `app.state.envs` holds them (expert plans on)."""
    app = FastAPI()
    app.state.envs, app.state.infos = {}, {}
    app.state.steps = 0

    @app.get("/")
    def ok() -> str:
        return "ok"

    @app.post("/create")
    def create() -> int:
        idx = len(app.state.envs)
        app.state.envs[idx] = WebShopEnv(expert=True)
        return idx

    @app.post("/reset")
    def reset(query: ResetQuery) -> tuple[str, None]:
        session = query.session_id or 0
        split = "test" if session < 500 else "valid" if session < 1500 else "train"
        obs, app.state.infos[query.env_idx] = app.state.envs[query.env_idx].reset(
            options={"split": split, "index": session})
        return obs, None

    @app.post("/step")
    def step(query: StepQuery) -> dict:
        app.state.steps += 1
        obs, reward, terminated, _, app.state.infos[query.env_idx] = app.state.envs[query.env_idx].step(query.action)
        return {"state": obs, "reward": reward, "done": terminated, "info": None}

    @app.get("/available_actions")
    def available_actions(env_idx: int) -> dict:
        return app.state.infos[env_idx]["available_actions"]

    @app.post("/close")
    def close(query: CloseQuery) -> dict:
        return {"closed": app.state.envs.pop(query.env_idx, None) is not None}

    return app


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port in a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the stand-in WebShop server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
