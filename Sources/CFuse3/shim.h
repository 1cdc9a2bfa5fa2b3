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

#include <semaphore.h>
#include <time.h>
/* sem_clockwait (glibc 2.30+, a GNU extension): a semaphore wait against CLOCK_MONOTONIC, which a
   change of the wall clock cannot stretch. */
extern int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime);
static inline int cfuse_sem_clockwait_monotonic(sem_t *sem, const struct timespec *abstime) {
    return sem_clockwait(sem, CLOCK_MONOTONIC, abstime);
}
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
