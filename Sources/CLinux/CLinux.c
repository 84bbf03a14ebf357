#include "CLinux.h"

#include <sys/syscall.h>
#include <unistd.h>

enum { ioprio_who_process = 1, ioprio_class_shift = 13 };

int clinux_ioprio_set_thread(int tid, int ioprio_class, int level) {
    return (int)syscall(SYS_ioprio_set, ioprio_who_process, tid, (ioprio_class << ioprio_class_shift) | level);
}

int clinux_ioprio_get_thread(int tid) {
    return (int)syscall(SYS_ioprio_get, ioprio_who_process, tid);
}
