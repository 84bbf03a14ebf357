// CLinux: Linux system calls that glibc does not wrap, as typed C functions.
//
// Why it exists: ioprio_set(2) has no glibc wrapper and syscall(2) is variadic, which Swift
// cannot call. One function per call, and nothing else.
#ifndef CLINUX_H
#define CLINUX_H

/// ioprio_set(2) for one thread (IOPRIO_WHO_PROCESS with a thread id): class 3 (idle) puts its
/// I/O behind everyone else's. Returns 0, or -1 with errno set.
int clinux_ioprio_set_thread(int tid, int ioprio_class, int level);

/// ioprio_get(2) for one thread: the class (bits 13 and up) and level, or -1 with errno set.
int clinux_ioprio_get_thread(int tid);

#endif
