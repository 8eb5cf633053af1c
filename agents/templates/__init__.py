"""What a later turn's prompt holds: whether a model's chat template renders each later turn as an extension of the
token stream (`check.py`, behind `alprl check-template`), and the rules that build a later prompt that does not
(`history.py`: `env.think_history=strip`'s rendering, `env.context`'s compaction), each starting a new trace."""
