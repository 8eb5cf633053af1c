"""Request file paths: which are accepted, where each lives in the run's workdir, how absolute ones are mapped.

Relative paths ("a/b.txt") live in the run's private workdir. Absolute ones (SandboxFusion accepts e.g.
"/mnt/data.txt") are stored at <workdir>/.root/<path>, and each such file's directory is bind-mounted over the same
directory in a mount namespace private to the run (`bind_absolute`, called by `sandbox.child.prepare` before user
code): user code's ``open("/mnt/data.txt")`` finds it, the host's /mnt is never written, and the fetch helper reads
the workdir copy back. This needs the zygote's private mount tree ("mount" layer); without it absolute paths are
refused (422 at the HTTP layer, a setup error here as defence in depth).
"""

from __future__ import annotations

import os

from sandbox import _linux

ABS_ROOT = ".root"
NO_ABS_UNDER = ("proc", "sys", "dev")


def safe_relpath(path: str) -> str:
    """Reject absolute paths, '..' and empty components (the HTTP layer checks too; this is defence in depth)."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe file path {path!r}")
    return path


def safe_path(path: str) -> str:
    """A relative path (safe_relpath), or an absolute one naming a file below a directory other than /, /proc,
    /sys, /dev; raises ValueError otherwise."""
    if not path.startswith("/"):
        return safe_relpath(path)
    rel = safe_relpath(path[1:])
    if "/" not in rel or rel.split("/")[0] in NO_ABS_UNDER:
        raise ValueError(f"absolute file path {path!r} must name a file inside a directory, not in /, /proc, "
                         "/sys or /dev")
    return path


def stored_path(path: str) -> str:
    """Where a request path lives, relative to the workdir: "/mnt/b" → ".root/mnt/b", "a/b" → "a/b"."""
    return ABS_ROOT + safe_path(path) if path.startswith("/") else safe_relpath(path)


def bind_absolute(workdir: str, paths, uid: int | None, protected: tuple[str, ...] | None) -> None:
    """Give the run a private mount namespace where each absolute path's directory is <workdir>/.root/<dir>.

    protected: directories no mount may cover or sit inside (the workdirs' root, the interpreter, sys.path, the
    sandbox package); None when the zygote has no private mount tree, in which case absolute paths are refused.
    """
    dirs = sorted({os.path.dirname(safe_path(p)) for p in paths if p.startswith("/")})
    dirs = [d for d in dirs if not any(d.startswith(q + "/") for q in dirs)]  # one mount covers its subdirs
    if not dirs:
        return
    if protected is None:
        raise ValueError("absolute file paths need the sandbox's mount layer (not active on this server)")
    for d in dirs:
        real = os.path.realpath(d)  # e.g. /lib → /usr/lib: judge where the mount would really land
        clash = [q for q in protected for x in {d, real} if q == x or q.startswith(x + "/") or x.startswith(q + "/")]
        if clash:
            raise ValueError(f"absolute file paths in {d!r} would cover the sandbox's own files ({clash[0]})")
    _linux.unshare(_linux.CLONE_NEWNS)  # copies the zygote's private tree; mounts made here die with the run
    for d in dirs:
        src = os.path.join(workdir, ABS_ROOT + d)
        os.makedirs(src, mode=0o700, exist_ok=True)
        if uid is not None:
            for parent in _ancestors(src, workdir):
                os.lchown(parent, uid, uid)
        try:
            os.makedirs(d, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"directory {d!r} does not exist and cannot be created: {exc.strerror}") from None
        _linux.mount(src, d, None, _linux.MS_BIND)


def _ancestors(path: str, root: str) -> list[str]:
    out = []
    while path != root and path.startswith(root + "/"):
        out.append(path)
        path = os.path.dirname(path)
    return out
