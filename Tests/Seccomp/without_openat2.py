#!/usr/bin/env python3
"""Runs a command as on a kernel without openat2(2): a seccomp filter (libseccomp, through ctypes) makes
every openat2 call of the command and its children fail with ENOSYS, as an older kernel or a container
runtime that filters the call does. PatchSync's tree lookups then take their other path, one
openat(..., O_NOFOLLOW) per component; `make test` runs the staging tests once more this way.

    python3 Tests/Seccomp/without_openat2.py swift test --skip-build --filter StagingSafety

Exits 70 when the filter cannot be installed or does not take (checked with a raw openat2 call first).
"""
import ctypes
import ctypes.util
import errno
import os
import sys

SCMP_ACT_ALLOW = 0x7FFF0000


def scmp_act_errno(code):
    return 0x00050000 | (code & 0x0000FFFF)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 64
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as error:
        print(f"without_openat2: libseccomp not found ({error}); install libseccomp2", file=sys.stderr)
        return 70
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    number = lib.seccomp_syscall_resolve_name(b"openat2")
    if number < 0:
        print("without_openat2: libseccomp does not know openat2", file=sys.stderr)
        return 70
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not context or lib.seccomp_rule_add(context, scmp_act_errno(errno.ENOSYS), number, 0) != 0 or lib.seccomp_load(context) != 0:
        print("without_openat2: the seccomp filter could not be installed", file=sys.stderr)
        return 70
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), ctypes.c_int(-100), ctypes.c_char_p(b"."), ctypes.c_void_p(None), ctypes.c_size_t(24))
    if result != -1 or ctypes.get_errno() != errno.ENOSYS:
        print(f"without_openat2: openat2 still answers ({result}, errno {ctypes.get_errno()})", file=sys.stderr)
        return 70
    print(f"without_openat2: openat2 (syscall {number}) fails with ENOSYS for: {' '.join(sys.argv[1:])}", file=sys.stderr)
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
