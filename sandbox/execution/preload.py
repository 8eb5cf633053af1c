"""What a zygote holds before its first fork: `site`'s builtins, `random` with a cheap at-fork reseed, the preload
modules, all frozen out of the garbage collector. Everything here is in every run's address space, so it is kept
to what runs need (see `sandbox.settings.LIGHT_PRELOAD`)."""

from __future__ import annotations

import gc
import importlib
import os
import sys


def preload(modules: tuple[str, ...], errors: dict[str, str]) -> list[str]:
    """Import `modules` (a failure is recorded in `errors` and only costs speed); returns those imported."""
    site_builtins()
    loaded = []
    if modules:  # the light preloads and sympy import `random`: first, with a cheaper hook
        import_random_with_c_reseed()
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:
            errors[f"preload.{name}"] = repr(exc)
    gc.collect()
    gc.freeze()  # keep preloaded objects out of GC passes, so forked children do not copy their pages
    return loaded


def site_builtins() -> None:
    """What `site` gives every interpreter and a zygote (started with -S) skips: exit() and quit() (which user
    code calls), help(), copyright, credits and license. Importing `site` under -S runs none of its path work."""
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()


def import_random_with_c_reseed() -> None:
    """Import `random` so that each forked run reseeds it in C rather than through random.py.

    `random` registers its instance's Python-level `seed` as an at-fork hook; running it in every child touches
    pages all over the zygote's heap (~50 copy-on-write faults a fork on a VM). The hook registered here is the C
    method on the same instance: the same fresh urandom seed per child for ~17 faults (~113 -> ~80 a fork).
    (random.py's `seed` also resets `gauss_next`; the zygote never calls `gauss`, so children inherit None.)
    A `random` imported before this keeps its own hook.
    """
    if "random" in sys.modules:
        return
    import _random
    import functools

    hooks: list[dict] = []
    register = os.register_at_fork
    os.register_at_fork = lambda **kwargs: hooks.append(kwargs)
    try:
        import random
    finally:
        os.register_at_fork = register
    for kwargs in hooks:
        if kwargs == {"after_in_child": random._inst.seed}:
            kwargs = {"after_in_child": functools.partial(_random.Random.seed, random._inst)}
        register(**kwargs)
