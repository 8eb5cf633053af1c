"""`ConfigError`, in a module of its own: the config's sections (trainer/config/), its validation (trainer/setup/) and
the rooms that check a value only once the run has started all raise it, and none of them need import the others."""


class ConfigError(ValueError):
    """A bad configuration key or value (one line: what, where, what to do)."""
