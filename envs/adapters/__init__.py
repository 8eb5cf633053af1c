"""Adapters to the real ALFWorld and WebShop, behind the interfaces of their generated twins (envs/__init__.py:
ADAPTER_TWINS), so the household and shop agents, and models trained on the twins, run on them unchanged.

They need what this project cannot fetch at run time (the `alfworld` package and its game files; a running WebShop
server); creating one without it raises `AdapterUnavailable`, one line that says what is missing and how to get it.
"""


class AdapterUnavailable(RuntimeError):
    """What a real-environment adapter needs is not here (package, data or server)."""
