// CLinux: Linux system calls that glibc does not wrap, as typed C functions.
//
// Why it exists: ioprio_set(2) and openat2(2) have no glibc wrapper, and syscall(2) and fcntl(2) are variadic,
// which Swift cannot call (open file description locks need fcntl with a struct flock). One
// function per call, and nothing else.
#ifndef CLINUX_H
#define CLINUX_H

/// ioprio_set(2) for one thread (IOPRIO_WHO_PROCESS with a thread id): class 3 (idle) puts its
/// I/O behind everyone else's. Returns 0, or -1 with errno set.
int clinux_ioprio_set_thread(int tid, int ioprio_class, int level);

/// ioprio_get(2) for one thread: the class (bits 13 and up) and level, or -1 with errno set.
int clinux_ioprio_get_thread(int tid);

/// fcntl(F_OFD_SETLK or F_OFD_SETLKW) over the whole file: a read (shared) or write (exclusive)
/// lock owned by the open file description, so a child that inherits the descriptor keeps it.
/// Returns 0, or -1 with errno set (EAGAIN when another holds a conflicting lock and wait is 0).
int clinux_ofd_lock(int fd, int exclusive, int wait);

/// fcntl(F_OFD_GETLK) over the whole file: 1 when another open file description holds a lock that
/// conflicts with a write lock, 0 when none does, -1 with errno set. Takes no lock itself.
int clinux_ofd_locked(int fd);

/// openat2(2) of `path` below the directory `dirfd` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS: no component may be a symbolic link or climb out. Returns the descriptor,
/// or -1 with errno set (ELOOP or EXDEV for a link or an escape; ENOSYS where the kernel lacks it).
int clinux_openat2_beneath(int dirfd, const char *path, int flags, unsigned int mode);

/// ioctl(FS_IOC_GETFLAGS) of `fd`: the inode's flags (FS_CASEFOLD_FL among them) into `flags`.
/// Returns 0, or -1 with errno set (ENOTTY where the file system keeps no such flags).
int clinux_inode_flags(int fd, unsigned int *flags);

/// statfs(2) of `path`: the file system's magic number (f_type), or -1 with errno set.
long clinux_fs_type(const char *path);

#endif
