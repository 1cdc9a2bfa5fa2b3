#ifndef COORDFS_CLINUX_SHIM_H
#define COORDFS_CLINUX_SHIM_H

// The Linux calls and constants Swift's Glibc module hides (it is built without _GNU_SOURCE), for
// the LinuxGNU module alone: renameat2, copy_file_range, fallocate, fstatfs's type, xattrs, file
// handles, fanotify; and the event log's CRC-32 by carry-less multiplication. Nothing of libfuse
// (that is CFuse3, FuseKit's).
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>

// GNU/Linux calls that Swift's Glibc module does not show (it is built without _GNU_SOURCE).
static inline int clinux_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}
static inline long clinux_copy_file_range(int fd_in, long long *off_in, int fd_out, long long *off_out, size_t len, unsigned int flags) {
    return syscall(SYS_copy_file_range, fd_in, off_in, fd_out, off_out, len, flags);
}
#include <fcntl.h>
#include <sys/xattr.h>
static inline int clinux_fallocate(int fd, int mode, long long offset, long long len) {
    return (int)syscall(SYS_fallocate, fd, mode, offset, len);
}
#include <sys/vfs.h>
/* The file system type (statfs f_type, linux/magic.h) of fd's file, or -1. */
static inline long clinux_fs_type(int fd) {
    struct statfs s;
    return fstatfs(fd, &s) == 0 ? (long)s.f_type : -1;
}
#include <sys/stat.h>
static const int CLINUX_O_PATH = 010000000;      /* O_PATH */
static const int CLINUX_O_DIRECT = 040000;       /* O_DIRECT on x86_64 and arm64 */
static const int CLINUX_AT_EMPTY_PATH = 0x1000;  /* AT_EMPTY_PATH */
static const int CLINUX_AT_HANDLE_FID = 0x200;   /* AT_HANDLE_FID (Linux 6.5): a handle to compare, not to open */
static const long CLINUX_UTIME_NOW = ((1l << 30) - 1l);
static const long CLINUX_UTIME_OMIT = ((1l << 30) - 2l);
static const int CLINUX_FALLOC_FL_KEEP_SIZE = 0x01;
static const int CLINUX_FALLOC_FL_PUNCH_HOLE = 0x02;
/* name_to_handle_at / open_by_handle_at with a fixed-size handle (MAX_HANDLE_SZ is 128). */
struct clinux_file_handle {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
};
static inline int clinux_name_to_handle_at(int dirfd, const char *name, struct clinux_file_handle *h, int *mount_id, int flags) {
    h->handle_bytes = 128;
    return (int)syscall(SYS_name_to_handle_at, dirfd, name, h, mount_id, flags);
}
static inline int clinux_open_by_handle_at(int mount_fd, struct clinux_file_handle *h, int flags) {
    return (int)syscall(SYS_open_by_handle_at, mount_fd, h, flags);
}
#include <sys/fanotify.h>
static inline int clinux_fanotify_init(unsigned int flags, unsigned int event_f_flags) {
    return fanotify_init(flags, event_f_flags);
}
static inline int clinux_fanotify_mark(int fd, unsigned int flags, unsigned long long mask, int dirfd, const char *path) {
    return fanotify_mark(fd, flags, mask, dirfd, path);
}
static const unsigned int CLINUX_FAN_REPORT_DFID_NAME = FAN_REPORT_DIR_FID | FAN_REPORT_NAME;
static const unsigned int CLINUX_FAN_REPORT_FID = FAN_REPORT_FID;
static const unsigned int CLINUX_FAN_REPORT_TARGET_FID = 0x00001000; /* FAN_REPORT_TARGET_FID (Linux 5.17) */
static const unsigned int CLINUX_FAN_CLASS_NOTIF = FAN_CLASS_NOTIF;
static const unsigned int CLINUX_FAN_MARK_ADD = FAN_MARK_ADD;
static const unsigned int CLINUX_FAN_MARK_REMOVE = FAN_MARK_REMOVE;
static const unsigned long long CLINUX_FAN_MODIFY = FAN_MODIFY;
static const unsigned long long CLINUX_FAN_ATTRIB = FAN_ATTRIB;
static const unsigned long long CLINUX_FAN_CLOSE_WRITE = FAN_CLOSE_WRITE;
static const unsigned long long CLINUX_FAN_CREATE = FAN_CREATE;
static const unsigned long long CLINUX_FAN_DELETE = FAN_DELETE;
static const unsigned long long CLINUX_FAN_RENAME = 0x10000000ULL;
static const unsigned long long CLINUX_FAN_EVENT_ON_CHILD = FAN_EVENT_ON_CHILD;
static const unsigned long long CLINUX_FAN_ONDIR = FAN_ONDIR;
static const unsigned long long CLINUX_FAN_Q_OVERFLOW = FAN_Q_OVERFLOW;

static const unsigned int CLINUX_RENAME_NOREPLACE = RENAME_NOREPLACE;
static const unsigned int CLINUX_RENAME_EXCHANGE = RENAME_EXCHANGE;
static const unsigned int CLINUX_RENAME_WHITEOUT = RENAME_WHITEOUT;

/* getxattrat(2) (Linux 6.13; one syscall number on every architecture since 424): an xattr of the
   name `name` in directory dirfd, without a path through /proc. -1 with errno ENOSYS before 6.13. */
struct clinux_xattr_args {
    unsigned long long value;
    unsigned int size;
    unsigned int flags;
};
static inline long clinux_getxattrat(int dirfd, const char *name, int at_flags, const char *attribute, void *value, unsigned int size) {
    struct clinux_xattr_args args = { (unsigned long long)(unsigned long)value, size, 0 };
    return syscall(464, dirfd, name, at_flags, attribute, &args, sizeof(args));
}
static const int CLINUX_AT_SYMLINK_NOFOLLOW = 0x100;

/* open_tree(fd, "", AT_EMPTY_PATH | OPEN_TREE_CLOEXEC) (Linux 5.2; one syscall number on every
   architecture, 428): an O_PATH descriptor on what fd refers to, without a path walk (no
   OPEN_TREE_CLONE: no privilege needed). */
static inline int clinux_path_descriptor(int fd) {
    return (int)syscall(428, fd, "", 0x1000 /* AT_EMPTY_PATH */ | 02000000 /* OPEN_TREE_CLOEXEC = O_CLOEXEC */);
}
/* fchmodat2(fd, "", mode, AT_EMPTY_PATH) (Linux 6.6; one syscall number on every architecture,
   452): chmod of what an O_PATH descriptor refers to, without a path walk (fchmod refuses O_PATH
   descriptors; glibc 2.36 has no wrapper). -1 and ENOSYS before 6.6. */
static inline int clinux_fchmod_path_descriptor(int fd, unsigned int mode) {
    return (int)syscall(452, fd, "", mode, 0x1000 /* AT_EMPTY_PATH */);
}
#include <sys/socket.h>
#include <netinet/in.h>
#include <string.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>
/* The uid owning the TCP socket on this machine whose own address is (src, sport) and whose peer
   is (dst, dport): the other end of a loopback connection, found by sock_diag (an exact look-up,
   no dump, no privilege needed; the uid /proc/net/tcp shows). family AF_INET (4-byte addresses) or
   AF_INET6 (16 bytes); ports in network byte order. -1 when there is no such socket. */
static inline long clinux_tcp_socket_uid(int family, const void *src, unsigned short sport, const void *dst, unsigned short dport) {
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -1;
    struct { struct nlmsghdr nlh; struct inet_diag_req_v2 r; } req;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = (unsigned char)family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0U;
    req.r.id.idiag_sport = sport;
    req.r.id.idiag_dport = dport;
    size_t n = family == AF_INET6 ? 16 : 4;
    memcpy(req.r.id.idiag_src, src, n);
    memcpy(req.r.id.idiag_dst, dst, n);
    req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.nl_family = AF_NETLINK;
    long uid = -1;
    if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) == (ssize_t)sizeof req) {
        long buffer[1024];
        ssize_t got = recv(fd, buffer, sizeof buffer, 0);
        struct nlmsghdr *h = (struct nlmsghdr *)buffer;
        if (got > 0 && NLMSG_OK(h, (unsigned int)got) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            struct inet_diag_msg *m = (struct inet_diag_msg *)NLMSG_DATA(h);
            uid = (long)m->idiag_uid;
        }
    }
    close(fd);
    return uid;
}
#include <linux/capability.h>
/* What `clinux_withhold_root_reserve` changed in the calling thread's credentials. */
struct clinux_thread_credentials {
    unsigned int fsuid;
    unsigned int effective[2];
    int changed;
};
/* Makes the calling thread's writes those of a user other than root as far as the blocks a file
   system keeps for root go (ext4 lets a writer into them when its fsuid is the reserve's user, root
   by default, or it has CAP_SYS_RESOURCE; quotas' hard limits yield to CAP_SYS_RESOURCE too): fsuid
   `uid` and CAP_SYS_RESOURCE out of the effective set. Every other capability stays as it was
   (setfsuid takes the file-system ones out of the effective set: they are put back), so nothing
   else is judged otherwise. setfsuid, capget and capset act on this thread alone. */
static inline void clinux_withhold_root_reserve(unsigned int uid, struct clinux_thread_credentials *saved) {
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    saved->changed = 0;
    if (syscall(SYS_capget, &h, d) != 0) return;
    saved->effective[0] = d[0].effective;
    saved->effective[1] = d[1].effective;
    saved->fsuid = (unsigned int)syscall(SYS_setfsuid, uid);
    saved->changed = 1;
    d[0].effective &= ~(1u << CAP_SYS_RESOURCE);
    (void)syscall(SYS_capset, &h, d);
}
/* Puts back the calling thread's effective capability set as `effective` (both words) had it. */
static inline void clinux_put_back_effective(const unsigned int effective[2]) {
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) return;
    d[0].effective = effective[0];
    d[1].effective = effective[1];
    (void)syscall(SYS_capset, &h, d);
}
/* Puts back what `clinux_withhold_root_reserve` changed. */
static inline void clinux_restore_root_reserve(const struct clinux_thread_credentials *saved) {
    if (!saved->changed) return;
    (void)syscall(SYS_setfsuid, saved->fsuid);
    clinux_put_back_effective(saved->effective);
}
#include <errno.h>
#include <stdlib.h>
/* What `clinux_act_as` changed in the calling thread's credentials. */
struct clinux_acting_credentials {
    unsigned int fsuid;
    unsigned int fsgid;
    unsigned int effective[2];
    unsigned int *groups;
    int ngroups;
    int changed;
};
/* Puts back what `clinux_act_as` changed: the thread's fsuid, fsgid, supplementary groups and
   effective capabilities. */
static inline void clinux_stop_acting(struct clinux_acting_credentials *saved) {
    if (saved->changed) {
        (void)syscall(SYS_setfsuid, saved->fsuid);
        (void)syscall(SYS_setfsgid, saved->fsgid);
        (void)syscall(SYS_setgroups, saved->ngroups, saved->groups);
        clinux_put_back_effective(saved->effective);
        saved->changed = 0;
    }
    free(saved->groups);
    saved->groups = NULL;
}
/* Makes the calling thread's file-system access that of another user, for the kernel to judge as
   it judges that user's: fsuid `uid`, fsgid `gid`, supplementary groups `groups` (`n` of them).
   A fsuid other than 0 takes the file-system capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
   CAP_FOWNER, ...) out of the effective set, so modes, POSIX ACLs and groups decide as natively.
   setfsuid, setfsgid and the raw setgroups system call act on this thread alone (glibc's setgroups
   changes every thread's: never that). 0 when all is changed; -1 with errno when something could
   not be, and then nothing is left changed. Undone by `clinux_stop_acting` (also after -1). */
static inline int clinux_act_as(unsigned int uid, unsigned int gid, const unsigned int *groups, int n,
                                struct clinux_acting_credentials *saved) {
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    saved->changed = 0;
    saved->groups = NULL;
    saved->ngroups = 0;
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    saved->effective[0] = d[0].effective;
    saved->effective[1] = d[1].effective;
    long count = syscall(SYS_getgroups, 0, NULL);
    if (count < 0) return -1;
    saved->groups = malloc((size_t)(count > 0 ? count : 1) * sizeof(unsigned int));
    if (saved->groups == NULL) { errno = ENOMEM; return -1; }
    count = syscall(SYS_getgroups, count, saved->groups);
    if (count < 0) return -1;
    saved->ngroups = (int)count;
    if (syscall(SYS_setgroups, n, groups) != 0) return -1;
    saved->changed = 1;
    saved->fsgid = (unsigned int)syscall(SYS_setfsgid, gid);
    saved->fsuid = (unsigned int)syscall(SYS_setfsuid, uid);
    /* setfsuid and setfsgid say the previous id even when they refuse: asked again with -1. */
    if ((unsigned int)syscall(SYS_setfsuid, -1) != uid || (unsigned int)syscall(SYS_setfsgid, -1) != gid) {
        clinux_stop_acting(saved);
        errno = EPERM;
        return -1;
    }
    return 0;
}
#include <malloc.h>
/* A pidfd of process pid (Linux 5.3): its inode number tells processes apart with pidfs (6.9). */
static inline int clinux_pidfd_open(int pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}
/* The heap bytes in use (mallinfo2's uordblks), for memory benchmarks. */
static inline size_t clinux_heap_in_use(void) {
    return mallinfo2().uordblks;
}
/* CRC-32 (IEEE 802.3, reflected: the checksum of the event log's frames) by carry-less
   multiplication (PCLMULQDQ), folding 16 bytes at a time (Intel's "Fast CRC Computation Using
   PCLMULQDQ", the constants of zlib's and Linux's versions): the same checksum as the table-driven
   one, in a few instructions per 16 bytes. `crc` is the running value, inverted (0xFFFFFFFF at the
   start), returned the same way, for bytes [0, len & ~15) of `buf` (len at least 16); the caller
   checksums the rest. Only where `clinux_has_pclmul()`. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("pclmul,sse4.1")))
static inline uint32_t clinux_crc32_fold16(const unsigned char *buf, size_t len, uint32_t crc) {
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x1 = _mm_loadu_si128((const __m128i *)buf);
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    buf += 16;
    len -= 16;
    while (len >= 16) {
        __m128i x2 = _mm_loadu_si128((const __m128i *)buf);
        __m128i x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett's reduction to 32. */
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static inline int clinux_has_pclmul(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_PCLMUL) && (c & bit_SSE4_1);
}
#else
static inline uint32_t clinux_crc32_fold16(const unsigned char *buf, size_t len, uint32_t crc) { return crc; }
static inline int clinux_has_pclmul(void) { return 0; }
#endif

#endif
