"""Thin ctypes wrappers for the Linux calls Python 3.11 lacks: unshare(2), mount(2), prctl(2).

Every wrapper raises `OSError` with errno on failure, so callers can detect a layer by trying it.
Constants are from <sched.h>, <sys/mount.h> and <linux/prctl.h>.
"""

from __future__ import annotations

import _socket
import ctypes
import fcntl
import os
import signal
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}

SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1  # <net/if.h>

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

# dlopen(NULL): the process's own symbols, libc included. (ctypes.util.find_library would spawn ldconfig and
# import subprocess → threading, whose at-fork hook then runs, and costs, in every forked child.)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """Move the calling (single-threaded) process into new namespaces given by CLONE_* `flags`."""
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    """mount(2); `data` is the comma-separated option string (e.g. ``"size=64m,mode=1777"``)."""
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount({target!r}, {fstype})")


def loopback_up() -> None:
    """Bring `lo` up in the caller's network namespace (a new one has it down), as `ip link set lo up` would.

    SIOCSIFFLAGS on a throw-away socket; needs CAP_NET_ADMIN in the namespace (root, or root of our userns).
    A new namespace has no other interface and no route, so only 127.0.0.0/8 and ::1 become reachable.
    """
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)  # the C module: a zygote never imports `socket`
    try:
        ifreq = struct.pack("16sh22x", b"lo", 0)  # struct ifreq: name[16], then the ifr_flags union member
        flags = struct.unpack("16sh22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def readonly_remount_all(skip: tuple[str, ...]) -> list[str]:
    """Make every mount read-only — call ONLY inside a private mount namespace.

    MS_BIND|MS_REMOUNT changes per-mount flags, which belong to this namespace's copy of the mount; without
    MS_BIND a remount would change the shared superblock. Existing nosuid/nodev/noexec/atime flags are kept
    (a user namespace refuses to clear them). Returns "target: reason" for mounts that could not be changed.
    """
    failed = []
    with open("/proc/self/mountinfo") as f:
        entries = [line.split() for line in f]
    for fields in entries:
        target = fields[4].encode().decode("unicode_escape")  # mountinfo escapes spaces as \040
        if target.startswith(skip):
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for opt in fields[5].split(","):
            flags |= _OPTION_FLAGS.get(opt, 0)
        try:
            mount(None, target, None, flags)
        except OSError as exc:
            failed.append(f"{target}: {exc.strerror}")
    return failed


def blocked_ancestor(path: str) -> str | None:
    """The topmost directory on `path` that other users cannot traverse (no o+x), or None."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return None
    return None


def expose_through(paths: list[str]) -> list[str]:
    """Make `paths` reachable for other uids although an ancestor (e.g. /root, 0700) is closed to them.

    Inside a private mount namespace only: the closed ancestor is covered by an empty read-only tmpfs into
    which just `paths` are bind-mounted (read-only) — its other contents stay hidden. Returns what was exposed.
    """
    roots = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    roots = [p for p in roots if not any(p != q and p.startswith(q + "/") for q in roots)]
    blocked: dict[str, list[str]] = {}
    for path in roots:
        top = blocked_ancestor(path)
        if top is not None:
            blocked.setdefault(top, []).append(path)
    exposed = []
    for top, inside in blocked.items():
        fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in inside}  # handles before covering `top`
        try:
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
            for path, fd in fds.items():
                os.makedirs(path, mode=0o755, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
                exposed.append(path)
            mount(None, top, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        finally:
            for fd in fds.values():
                os.close(fd)
    return exposed


def mount_tmpfs_keeping(directory: str, options: str, keep: list[str]) -> list[str]:
    """Mount a fresh tmpfs on `directory`, bind-mounting back (read-only) the entries of `keep` inside it.

    Private mount namespace only. Used for /tmp when the interpreter or its venv lives there: without it the
    new tmpfs would hide the modules the sandbox imports. Returns the paths kept visible.
    """
    inside = sorted({os.path.realpath(p) for p in keep if os.path.isdir(p)
                     and os.path.realpath(p).startswith(directory.rstrip("/") + "/")})
    inside = [p for p in inside if not any(p != q and p.startswith(q + "/") for q in inside)]
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in inside}  # handles before covering `directory`
    try:
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for path, fd in fds.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        for fd in fds.values():
            os.close(fd)
    return inside


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def set_no_new_privs() -> None:
    """Forbid privilege gain through execve of setuid/setcap binaries (inherited, irreversible)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_child_subreaper() -> None:
    """Orphaned descendants re-parent to us instead of init, so we can find and reap them."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_parent_death_signal(sig: int) -> None:
    prctl(PR_SET_PDEATHSIG, sig)


def write_id_maps(uid: int, gid: int) -> None:
    """After unshare(CLONE_NEWUSER) as a non-root user: become root inside, mapped to `uid`/`gid` outside."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def pidfd_works() -> bool:
    """pidfd_open(2) (Linux ≥ 5.3, allowed by seccomp): lets a poll loop wait for a child's exit."""
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


def has_children() -> bool:
    """Whether the caller has any child left (reaps one exited child as a side effect)."""
    try:
        os.waitpid(-1, os.WNOHANG)
        return True
    except ChildProcessError:
        return False


def kill_quietly(pid: int) -> None:
    """SIGKILL `pid` (negative: a process group); gone or not ours is fine."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def drain(fd: int) -> None:
    """Empty a non-blocking pipe."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def children_of(pid: int) -> list[int]:
    """Pids whose parent is `pid` (scans /proc; used only when no PID namespace is available)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may itself contain spaces.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(name))
    return found


def pids_of_uid(uids: set[int]) -> list[int]:
    """Pids whose real uid is in `uids` (used at startup to make sure slot uids are unused)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    found.append(int(name))
            except OSError:
                continue
    return found
