#ifndef COORDFS_CFUSE3_SHIM_H
#define COORDFS_CFUSE3_SHIM_H

// libfuse 3.14's low-level API. Do not define _FILE_OFFSET_BITS here: it clashes with Glibc's module
// (x86_64 is LP64, off_t is 64-bit regardless).
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <fuse_opt.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

// Macros and variadics that Swift cannot import, as static inline functions.
static inline struct fuse_args cfuse_args_init(int argc, char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(argc, argv);
    return a;
}

static inline int cfuse_session_loop_mt(struct fuse_session *se, struct fuse_loop_config *config) {
    return fuse_session_loop_mt(se, config);
}

// GNU/Linux calls that Swift's Glibc module does not show (it is built without _GNU_SOURCE).
static inline int cfuse_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
static inline long cfuse_copy_file_range(int fd_in, long long *off_in, int fd_out, long long *off_out, size_t len, unsigned int flags) {
    return syscall(SYS_copy_file_range, fd_in, off_in, fd_out, off_out, len, flags);
}
#include <fcntl.h>
#include <sys/xattr.h>
static inline int cfuse_fallocate(int fd, int mode, long long offset, long long len) {
    return (int)syscall(SYS_fallocate, fd, mode, offset, len);
}
#include <semaphore.h>
#include <time.h>
/* sem_clockwait (glibc 2.30+, a GNU extension): a semaphore wait against CLOCK_MONOTONIC, which a
   change of the wall clock cannot stretch. */
extern int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime);
static inline int cfuse_sem_clockwait_monotonic(sem_t *sem, const struct timespec *abstime) {
    return sem_clockwait(sem, CLOCK_MONOTONIC, abstime);
}
#include <sys/vfs.h>
/* The file system type (statfs f_type, linux/magic.h) of fd's file, or -1. */
static inline long cfuse_fs_type(int fd) {
    struct statfs s;
    return fstatfs(fd, &s) == 0 ? (long)s.f_type : -1;
}
#include <sys/stat.h>
static const int CFUSE_O_PATH = 010000000;      /* O_PATH */
static const int CFUSE_O_DIRECT = 040000;       /* O_DIRECT on x86_64 and arm64 */
static const int CFUSE_AT_EMPTY_PATH = 0x1000;  /* AT_EMPTY_PATH */
static const int CFUSE_AT_HANDLE_FID = 0x200;   /* AT_HANDLE_FID (Linux 6.5): a handle to compare, not to open */
static const long CFUSE_UTIME_NOW = ((1l << 30) - 1l);
static const long CFUSE_UTIME_OMIT = ((1l << 30) - 2l);
static const int CFUSE_FALLOC_FL_KEEP_SIZE = 0x01;
static const int CFUSE_FALLOC_FL_PUNCH_HOLE = 0x02;
/* name_to_handle_at / open_by_handle_at with a fixed-size handle (MAX_HANDLE_SZ is 128). */
struct cfuse_file_handle {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
};
static inline int cfuse_name_to_handle_at(int dirfd, const char *name, struct cfuse_file_handle *h, int *mount_id, int flags) {
    h->handle_bytes = 128;
    return (int)syscall(SYS_name_to_handle_at, dirfd, name, h, mount_id, flags);
}
static inline int cfuse_open_by_handle_at(int mount_fd, struct cfuse_file_handle *h, int flags) {
    return (int)syscall(SYS_open_by_handle_at, mount_fd, h, flags);
}
#include <sys/fanotify.h>
static inline int cfuse_fanotify_init(unsigned int flags, unsigned int event_f_flags) {
    return fanotify_init(flags, event_f_flags);
}
static inline int cfuse_fanotify_mark(int fd, unsigned int flags, unsigned long long mask, int dirfd, const char *path) {
    return fanotify_mark(fd, flags, mask, dirfd, path);
}
static const unsigned int CFUSE_FAN_REPORT_DFID_NAME = FAN_REPORT_DIR_FID | FAN_REPORT_NAME;
static const unsigned int CFUSE_FAN_CLASS_NOTIF = FAN_CLASS_NOTIF;
static const unsigned int CFUSE_FAN_MARK_ADD = FAN_MARK_ADD;
static const unsigned int CFUSE_FAN_MARK_REMOVE = FAN_MARK_REMOVE;
static const unsigned long long CFUSE_FAN_MODIFY = FAN_MODIFY;
static const unsigned long long CFUSE_FAN_ATTRIB = FAN_ATTRIB;
static const unsigned long long CFUSE_FAN_CLOSE_WRITE = FAN_CLOSE_WRITE;
static const unsigned long long CFUSE_FAN_CREATE = FAN_CREATE;
static const unsigned long long CFUSE_FAN_DELETE = FAN_DELETE;
static const unsigned long long CFUSE_FAN_RENAME = 0x10000000ULL;
static const unsigned long long CFUSE_FAN_EVENT_ON_CHILD = FAN_EVENT_ON_CHILD;
static const unsigned long long CFUSE_FAN_ONDIR = FAN_ONDIR;
static const unsigned long long CFUSE_FAN_Q_OVERFLOW = FAN_Q_OVERFLOW;

static const unsigned int CFUSE_RENAME_NOREPLACE = RENAME_NOREPLACE;
static const unsigned int CFUSE_RENAME_EXCHANGE = RENAME_EXCHANGE;
static const unsigned int CFUSE_RENAME_WHITEOUT = RENAME_WHITEOUT;


#include <sys/ioctl.h>
#include <stdint.h>
// Kernel passthrough (Linux 6.9, FUSE protocol 7.40) is newer than libfuse 3.14 and its headers.
static const uint32_t CFUSE_INIT_EXT = 1u << 30;             /* FUSE_INIT_EXT in fuse_init_in/out.flags */
static const uint32_t CFUSE_PASSTHROUGH_FLAGS2 = 1u << 5;    /* FUSE_PASSTHROUGH (1ULL << 37), in flags2 */
static const uint32_t CFUSE_FOPEN_PASSTHROUGH = 1u << 7;     /* FOPEN_PASSTHROUGH in fuse_open_out */
static const uint32_t CFUSE_HANDLE_KILLPRIV_V2 = 1u << 28;   /* FUSE_HANDLE_KILLPRIV_V2 (7.33), in flags */
struct cfuse_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
/* FUSE_DEV_IOC_BACKING_OPEN: registers a backing file, returns its id (> 0) or -1 with errno. */
static inline int cfuse_backing_open(int devfd, int fd) {
    struct cfuse_backing_map map = { fd, 0, 0 };
    return ioctl(devfd, _IOW(229, 1, struct cfuse_backing_map), &map);
}
/* FUSE_DEV_IOC_BACKING_CLOSE */
static inline int cfuse_backing_close(int devfd, int backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, _IOW(229, 2, uint32_t), &id);
}
static inline long cfuse_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len, unsigned int flags) {
    return syscall(SYS_splice, fdin, offin, fdout, offout, len, flags);
}

#endif

// Relaxed atomic counters (the daemon's FUSE request counts, read by its metrics endpoint).
static inline void cfuse_counter_add(unsigned long long *counter, unsigned long long n) {
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}
static inline unsigned long long cfuse_counter_load(const unsigned long long *counter) {
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}
