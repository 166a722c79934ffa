"""A seccomp filter that keeps the graded process's result channel what it was when the plugin opened it.

The report plugin writes its records to one descriptor (``plugin._open_channel``). Code of the
project that runs in the same process could otherwise put another file under that number (``dup2`` of
``/dev/null`` over it, or ``close`` and reopen) so that the plugin's records go nowhere, and write a
forged stream of its own to a copy of the pipe. Once the plugin holds the channel, this filter makes the
kernel refuse, for the process and everything it starts:

- ``dup2``/``dup3`` onto the channel's number and ``close`` of it (``EPERM``);
- ``close_range`` (``ENOSYS``, as on a kernel without it: CPython's ``os.closerange`` and
  ``subprocess`` then close descriptor by descriptor, and the channel's ``close`` is refused);
- ``io_uring`` (``ENOSYS``), whose queued operations would close or replace descriptors without a
  system call the filter sees;
- ``ptrace`` and ``process_vm_readv``/``writev`` (``EPERM``): a child of the run reading the plugin's key
  out of its memory, or writing into it;
- system calls of another ABI than the interpreter's (x86's 32-bit entry and x32), whose numbers differ.

A filter cannot be removed once installed, and every child inherits it. ``install`` needs
``PR_SET_NO_NEW_PRIVS`` (set here; bubblewrap sets it too), and is called before any project code runs.
The program is classic BPF, written out below for the two architectures pdbgym runs on.
"""

from __future__ import annotations

import platform
import struct

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_NR_OFFSET, _ARCH_OFFSET, _ARGS_OFFSET = 0, 4, 16  # struct seccomp_data; args are 8 bytes each (low half first)
_PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS, _SECCOMP_MODE_FILTER = 22, 38, 2
_X32_BIT = 0x40000000


# Per machine: the audit arch, and the numbers of the calls the filter looks at (None: not on this ABI).
_ABIS = {
    "x86_64": (0xC000003E, {"close": 3, "dup2": 33, "dup3": 292, "close_range": 436,
                            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"close": 57, "dup2": None, "dup3": 24, "close_range": 436,
                             "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                             "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271}),
}


class SeccompUnavailable(RuntimeError):
    """The filter cannot be installed here (another architecture, no seccomp in the kernel)."""


def program(fd: int, machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter for channel descriptor ``fd`` as ``(code, jt, jf, k)`` instructions."""
    machine = machine or platform.machine()
    if machine not in _ABIS:
        raise SeccompUnavailable(f"no seccomp filter for the {machine!r} architecture (x86_64 and aarch64 only)")
    arch, numbers = _ABIS[machine]
    # Each entry: a label or an instruction whose jump targets may be labels; resolved below.
    code: list = [
        (_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
        (_LD_W_ABS, 0, 0, _NR_OFFSET),
    ]
    if machine == "x86_64":
        code += [(_JGE_K, "nosys", 0, _X32_BIT)]
    for name, target in (("close", "arg0"), ("dup2", "arg1"), ("dup3", "arg1"), ("close_range", "nosys"),
                         ("io_uring_setup", "nosys"), ("io_uring_enter", "nosys"), ("io_uring_register", "nosys"),
                         ("ptrace", "eperm"), ("process_vm_readv", "eperm"), ("process_vm_writev", "eperm")):
        if numbers[name] is not None:
            code.append((_JEQ_K, target, 0, numbers[name]))
    code += [
        (_RET_K, 0, 0, _RET_ALLOW),
        "arg0", (_LD_W_ABS, 0, 0, _ARGS_OFFSET), (_JEQ_K, "eperm", "allow", fd),
        "arg1", (_LD_W_ABS, 0, 0, _ARGS_OFFSET + 8), (_JEQ_K, "eperm", "allow", fd),
        "allow", (_RET_K, 0, 0, _RET_ALLOW),
        "eperm", (_RET_K, 0, 0, _RET_ERRNO | _EPERM),
        "nosys", (_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
    ]
    labels, index = {}, 0
    for entry in code:
        if isinstance(entry, str):
            labels[entry] = index
        else:
            index += 1
    resolved, index = [], 0
    for entry in code:
        if isinstance(entry, str):
            continue
        op, jt, jf, k = entry
        jt = labels[jt] - index - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - index - 1 if isinstance(jf, str) else jf
        resolved.append((op, jt, jf, k))
        index += 1
    return resolved


def install(fd: int) -> None:
    """Install the filter for channel descriptor ``fd`` in this process (irrevocably); raises
    ``SeccompUnavailable`` naming why it could not."""
    import ctypes  # in the sandbox, and only here: the module is dropped from sys.modules right after

    instructions = program(fd)
    raw = b"".join(struct.pack("=HBBI", *i) for i in instructions)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(instructions), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0 or \
            libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise SeccompUnavailable(f"prctl refused the result channel's seccomp filter: errno {ctypes.get_errno()}")
