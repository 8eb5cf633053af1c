"""`ConfigError`, in a module of its own: `trainer/config/train_config.py` calls `trainer/config/validation.py`, and
both raise it; defined in either, the other would have to import it back (an import circle)."""


class ConfigError(ValueError):
    """A bad configuration key or value (one line: what, where, what to do)."""
