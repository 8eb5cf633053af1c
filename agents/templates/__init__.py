"""Chat templates over multi-turn episodes: whether a model's template renders each later turn as an extension of the
token stream (`check.py`, behind `alprl check-template`), and the `env.think_history` policy that rests on it."""
