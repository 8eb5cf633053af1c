"""A small text environment built with openenv-core's own server classes, as an OpenEnv environment author writes
one (an `Environment` subclass with pydantic `Action` / `Observation` types, served by `create_fastapi_app`).

Guess a number from 1 to 9 in at most four tries. Its field names are not alprl's (`guess`, `prompt`), so
alprl/OpenEnv-v0 has to find them in the server's schema; wrong guesses pay `None` (no reward), as many OpenEnv
environments do mid-episode; the action refuses empty text (a schema rule), and `reset` takes no options, so the
server drops the ones alprl sends.
"""

from __future__ import annotations

import random
from typing import Any

from fastapi import FastAPI
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field

TRIES = 4


class GuessAction(Action):
    guess: str = Field(..., min_length=1, description="A number from 1 to 9")


class GuessObservation(Observation):
    prompt: str = Field(default="", description="What the game says")
    tries_left: int = Field(default=TRIES, description="Guesses left")


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    """The secret is drawn from the reset seed; 1.0 for the right guess, 0.0 when the tries run out."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    steps_served = 0  # every step of every instance, so a test can tell the server was played

    def __init__(self) -> None:
        super().__init__()
        self._secret, self._left = 0, TRIES
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> GuessObservation:
        self._secret, self._left = random.Random(seed).randint(1, 9), TRIES
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(prompt=f"Guess my number from 1 to 9. You have {TRIES} tries.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        GuessEnvironment.steps_served += 1
        self._left -= 1
        self._state.step_count += 1
        text = action.guess.strip()
        number = int(text) if text.isdigit() else None
        if number == self._secret:
            return GuessObservation(prompt="Right!", tries_left=self._left, reward=1.0, done=True)
        if self._left == 0:
            return GuessObservation(prompt=f"Out of tries; it was {self._secret}.", tries_left=0, reward=0.0,
                                    done=True)
        hint = "Not a number." if number is None else "Higher." if number < self._secret else "Lower."
        return GuessObservation(prompt=hint, tries_left=self._left)

    @property
    def state(self) -> State:
        return self._state


def guess_app() -> FastAPI:
    return create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=16)
