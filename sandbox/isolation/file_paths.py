"""Request file paths: which are accepted, where each lives in the run's workdir, how absolute ones are mapped.

Relative paths ("a/b.txt") live in the run's private workdir. Absolute ones (SandboxFusion accepts e.g.
"/mnt/data.txt") are stored at <workdir>/.root/<path>, and each such file's directory is bind-mounted over the same
directory in a mount namespace private to the run (`bind_absolute`, called by `sandbox.execution.child.prepare`
before user code): user code's ``open("/mnt/data.txt")`` finds it, the host's /mnt is never written, and the fetch helper reads
the workdir copy back. Paths below the zygote's private tmp dirs ("/tmp/a.txt") are used as they are: those tmpfs
are the run's own already and wiped after it. This needs the zygote's private mount tree ("mount" layer); without
it absolute paths are refused (422 at the HTTP layer, a setup error here as defence in depth).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from sandbox.isolation import linux

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


class AbsoluteMap(NamedTuple):
    """What a zygote with a private mount tree tells its run children about absolute paths.

    protected: directories no mapped path may cover or sit inside (the workdirs' root, the interpreter, sys.path,
    the sandbox package). tmp_dirs: the zygote's private tmpfs dirs (/tmp, /var/tmp, ...): wiped after every run
    already, so paths below them are used as they are, with no mount.
    """

    protected: tuple[str, ...]
    tmp_dirs: tuple[str, ...]

    def direct_root(self, path: str) -> str | None:
        """The private tmp dir `path` lies in, if any."""
        return next((t for t in self.tmp_dirs if path.startswith(t + "/")), None)


def host_path(path: str, workdir: str, amap: AbsoluteMap | None) -> tuple[str, str]:
    """(where a request path lives in the zygote's view, the directory it must stay confined to).

    "a/b" → <workdir>/a/b; "/tmp/x" → /tmp/x (a private tmp dir); "/mnt/b" → <workdir>/.root/mnt/b.
    """
    if not path.startswith("/"):
        return os.path.join(workdir, safe_relpath(path)), workdir
    safe_path(path)
    if amap is None:
        raise ValueError("absolute file paths need the sandbox's mount layer (not active on this server)")
    root = amap.direct_root(path)
    return (path, root) if root else (os.path.join(workdir, ABS_ROOT + path), workdir)


def absolute_paths(*groups) -> list[str]:
    """The absolute ones among request paths (`files` keys, `fetch_files`): they need the per-run mount."""
    return [p for group in groups for p in group if p.startswith("/")]


def check_absolute(paths, amap: AbsoluteMap | None) -> None:
    """Refuse absolute paths this run cannot map (before anything is written)."""
    for path in paths:
        if not path.startswith("/"):
            continue
        host_path(path, "/", amap)  # syntax, and a mount layer to map into
        d = os.path.dirname(path)
        direct = amap.direct_root(path) is not None  # no mount: only "inside a protected dir" matters
        for x in {d, os.path.realpath(d)}:  # e.g. /lib → /usr/lib: judge where it would really land
            clash = [q for q in amap.protected if q == x or x.startswith(q + "/")
                     or (not direct and q.startswith(x + "/"))]
            if clash:
                raise ValueError(f"absolute file path {path!r} would cover the sandbox's own files ({clash[0]})")


def bind_absolute(workdir: str, paths, uid: int | None, amap: AbsoluteMap | None) -> None:
    """Give the run a private mount namespace where each mapped absolute path's directory is <workdir>/.root/<dir>
    (paths below a private tmp dir need no mount). Call after check_absolute and make_workdir."""
    dirs = sorted({os.path.dirname(p) for p in paths if p.startswith("/") and not amap.direct_root(p)})
    dirs = [d for d in dirs if not any(d.startswith(q + "/") for q in dirs)]  # one mount covers its subdirs
    if not dirs:
        return
    linux.unshare(linux.CLONE_NEWNS)  # copies the zygote's private tree; mounts made here die with the run
    for d in dirs:
        src = os.path.join(workdir, ABS_ROOT + d)
        os.makedirs(src, mode=0o700, exist_ok=True)
        if uid is not None:
            for parent in ancestors(src, workdir):
                os.lchown(parent, uid, uid)
        try:
            os.makedirs(d, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"directory {d!r} does not exist and cannot be created: {exc.strerror}") from None
        linux.mount(src, d, None, linux.MS_BIND)


def ancestors(path: str, root: str) -> list[str]:
    """`path` and its parents up to, not including, `root`."""
    out = []
    while path != root and path.startswith(root + "/"):
        out.append(path)
        path = os.path.dirname(path)
    return out
