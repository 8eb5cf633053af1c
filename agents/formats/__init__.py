"""The agents' formats, one per env family: how an env's episodes become chat prompts and token ids, where a turn
stops, and what a sampled turn means to the env (the `agents.rollout.Agent` protocol): TIR and single-turn math, the
household and the shop's command lines, BFCL's function-calling chat."""
