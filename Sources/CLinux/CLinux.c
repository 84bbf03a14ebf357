#define _GNU_SOURCE
#include "CLinux.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef FS_IOC_GETFLAGS
#define FS_IOC_GETFLAGS _IOR('f', 1, long)
#endif

enum { ioprio_who_process = 1, ioprio_class_shift = 13 };

int clinux_ioprio_set_thread(int tid, int ioprio_class, int level) {
    return (int)syscall(SYS_ioprio_set, ioprio_who_process, tid, (ioprio_class << ioprio_class_shift) | level);
}

int clinux_ioprio_get_thread(int tid) {
    return (int)syscall(SYS_ioprio_get, ioprio_who_process, tid);
}

int clinux_ofd_lock(int fd, int exclusive, int wait) {
    struct flock lock;
    memset(&lock, 0, sizeof lock);
    lock.l_type = exclusive ? F_WRLCK : F_RDLCK;
    lock.l_whence = SEEK_SET;
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &lock);
}

int clinux_ofd_locked(int fd) {
    struct flock lock;
    memset(&lock, 0, sizeof lock);
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return -1;
    return lock.l_type == F_UNLCK ? 0 : 1;
}

int clinux_openat2_beneath(int dirfd, const char *path, int flags, unsigned int mode) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)flags;
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

int clinux_inode_flags(int fd, unsigned int *flags) {
    int value = 0;  // the kernel writes an int, whatever the request's declared size
    if (ioctl(fd, FS_IOC_GETFLAGS, &value) != 0) return -1;
    *flags = (unsigned int)value;
    return 0;
}

long clinux_fs_type(const char *path) {
    struct statfs fs;
    if (statfs(path, &fs) != 0) return -1;
    return (long)fs.f_type;
}
