"""The "seccomp" layer: a syscall filter over every run that makes the kernel calls untrusted Python never needs
fail with EPERM. A light zygote loads it into itself once, after its own set-up, and every child inherits it;
a heavy zygote's children load it right before user code, after the per-run mounts that absolute file paths need.

Default action ALLOW, so ordinary Python (imports, threads, subprocess, numpy) is untouched; the denied calls are
the ones behind most container escapes and kernel exploits that a process can still reach after the uid, rlimit
and namespace layers: tracing other processes (ptrace, process_vm_readv/writev), new namespaces or mounts
(unshare, setns, mount, pivot_root, ...: the zygote's own set-up happens before the filter exists), the kernel
keyring, eBPF, perf events, kexec and module loading, userfaultfd and io_uring (two large, bug-rich attack
surfaces), and the reboot / swap / accounting / quota / personality family. `clone` with a CLONE_NEW* flag is
refused too: without that rule a run could still make a user namespace (with every capability inside it) and a
network namespace through clone(2), reaching netfilter and the other code that trusts CAP_NET_ADMIN — the kernel
surface behind many local privilege escalations. `clone3` passes its flags in memory, where a filter cannot read
them, so it answers ENOSYS and the C library falls back to `clone` (what Docker's default profile does). EPERM
rather than a kill: code that probes a call gets an ordinary OSError, and the run's status stays what the snippet
made it.

Why our own ctypes binding rather than `pyseccomp`: pyseccomp locates libseccomp with `ctypes.util.find_library`,
which spawns `ldconfig` through subprocess and so imports threading into the zygote (its at-fork hook would then
run in every child; see `sandbox.isolation.linux`). Loading the soname ``libseccomp.so.2`` directly needs six functions.

Cost: the zygote builds and compiles the filter once (`Filter.build`) into a classic-BPF program (72 instructions
on x86-64); installing it is one prctl(PR_SET_SECCOMP) call (`Filter.install`), without calling into libseccomp,
but the kernel translates and JIT-compiles the program and precomputes which syscalls it always allows: ~0.3 ms
on the 2-core VM here, whatever the filter's length, which is why the light zygote pays it once instead of in
every run; `bench/sandbox_throughput.py` shows the per-run total. The filter checks the architecture: a call
through a foreign ABI (i386 `int 0x80`, x32 numbers on x86-64) kills the process (libseccomp's bad-arch action),
so the deny list cannot be bypassed through another syscall table.

Degrading: no libseccomp, an old one, or a kernel without seccomp filters → `SeccompUnavailable` with the reason;
the zygote reports it in `layer_errors["seccomp"]` and runs go on without the layer, unless the operator set
``SANDBOX_REQUIRE_SECCOMP=1`` (the server then refuses to start).
"""

from __future__ import annotations

import ctypes
import errno
import os

# Denied with EPERM. Names unknown on this architecture (e.g. kexec_file_load on some) are skipped.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev",  # reading / steering other processes
    "mount", "umount2", "umount", "pivot_root", "chroot", "unshare", "setns",  # namespaces and mounts
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",  # new mount API
    "keyctl", "add_key", "request_key",  # kernel keyring
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "personality",
)

# clone(2) flags that make a new namespace, <linux/sched.h>: clone with any of them gets EPERM
CLONE_NEW_FLAGS = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
                   "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                   "CLONE_NEWNET": 0x40000000}
ENOSYS_SYSCALLS = ("clone3",)  # flags in a struct in memory: unfilterable, so "not implemented" (libc falls back)

LIBSECCOMP = "libseccomp.so.2"  # by soname: no find_library (see above)
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO_BASE = 0x00050000  # SCMP_ACT_ERRNO(x) = 0x00050000 | (x & 0xffff), <seccomp.h>
SCMP_CMP_MASKED_EQ = 7  # enum scmp_compare: (arg & datum_a) == datum_b
SCMP_FLTATR_CTL_NNP = 3  # libseccomp attribute: set no_new_privs in seccomp_load (already set by the zygote)
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
NR_SCMP_ERROR = -1  # resolve_name: unknown name (calls only other arches have resolve to < -1, __PNR_*)


class SeccompUnavailable(RuntimeError):
    """The filter cannot be built or loaded here; the message says why."""


class _ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp, <seccomp.h>
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):  # struct sock_fprog, <linux/filter.h>: (length in 8-byte instructions, pointer)
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libseccomp() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBSECCOMP, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"{LIBSECCOMP} not loadable ({exc}); install libseccomp2") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _check(ret: int, what: str) -> None:
    if ret < 0:  # libseccomp returns -errno
        raise SeccompUnavailable(f"{what}: {os.strerror(-ret)}")


class Filter:
    """A compiled filter: `denied` names the calls it refuses (EPERM), `clone_flags` the clone(2) flags it refuses,
    `enosys` the calls it answers ENOSYS; `program` is the BPF bytes to install."""

    def __init__(self, denied: tuple[str, ...], program: bytes, clone_flags: tuple[str, ...] = (),
                 enosys: tuple[str, ...] = ()):
        self.denied, self.program, self.clone_flags, self.enosys = denied, program, clone_flags, enosys
        self._buf = ctypes.create_string_buffer(program, len(program))  # kept alive and fork-inherited
        self._fprog = _SockFprog(len(program) // 8, ctypes.cast(self._buf, ctypes.c_void_p))
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]

    @classmethod
    def build(cls, names: tuple[str, ...] = DENIED_SYSCALLS) -> Filter:
        """Resolve `names` for this architecture and compile the filter (in the zygote, once)."""
        lib = _libseccomp()
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        if not ctx:
            raise SeccompUnavailable("seccomp_init failed (libseccomp too old for this kernel?)")
        try:
            _check(lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0), "seccomp_attr_set")  # we set it ourselves
            denied = []
            for name in names:
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if nr < 0:  # unknown here (NR_SCMP_ERROR), or a pseudo-number for a call this arch lacks
                    continue
                _check(lib.seccomp_rule_add(ctx, SCMP_ACT_ERRNO_BASE | errno.EPERM, nr, 0), f"rule {name}")
                denied.append(name)
            clone_flags = _add_clone_rules(lib, ctx)
            enosys = []
            for name in ENOSYS_SYSCALLS:
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if nr >= 0:  # an old libseccomp that does not know clone3: its kernel calls fall to the default
                    _check(lib.seccomp_rule_add(ctx, SCMP_ACT_ERRNO_BASE | errno.ENOSYS, nr, 0), f"rule {name}")
                    enosys.append(name)
            r, w = os.pipe()  # export the compiled program (a few hundred bytes: fits a pipe buffer)
            try:
                _check(lib.seccomp_export_bpf(ctx, w), "seccomp_export_bpf")
                os.close(w)
                w = -1
                program = b"".join(iter(lambda: os.read(r, 65536), b""))
            finally:
                os.close(r)
                if w >= 0:
                    os.close(w)
        finally:
            lib.seccomp_release(ctx)
        if not program or len(program) % 8:
            raise SeccompUnavailable(f"libseccomp exported a {len(program)}-byte program")
        return cls(tuple(denied), program, clone_flags, tuple(enosys))

    def install(self) -> None:
        """Load the filter into the calling (single-threaded) process; inherited by everything it forks.

        Needs no_new_privs (set by the zygote) or CAP_SYS_ADMIN. Raises OSError when the kernel refuses.
        """
        if self._prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._fprog), 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")

    def probe(self) -> None:
        """Install in a throw-away child, so a kernel that refuses filters is found at start, not per run."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self.install()
                code = 0
            finally:
                os._exit(code)
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
            raise SeccompUnavailable("the kernel refused to load the filter (no CONFIG_SECCOMP_FILTER?)")

    def describe(self) -> dict:
        return {"action": "EPERM", "denied": list(self.denied), "denied_clone_flags": list(self.clone_flags),
                "enosys": list(self.enosys), "bpf_instructions": len(self.program) // 8}


def _add_clone_rules(lib: ctypes.CDLL, ctx: int) -> tuple[str, ...]:
    """clone(2) with any CLONE_NEW* flag → EPERM: one rule per flag, `(flags & bit) == bit` (rules are OR-ed)."""
    nr = lib.seccomp_syscall_resolve_name(b"clone")
    if nr < 0:
        return ()
    flags_arg = 1 if os.uname().machine.startswith("s390") else 0  # s390 swaps clone's first two arguments
    for name, bit in CLONE_NEW_FLAGS.items():
        cmp = _ArgCmp(flags_arg, SCMP_CMP_MASKED_EQ, bit, bit)
        _check(lib.seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO_BASE | errno.EPERM, nr, 1, ctypes.byref(cmp)),
               f"rule clone {name}")
    return tuple(CLONE_NEW_FLAGS)
