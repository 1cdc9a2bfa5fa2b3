#ifndef COORDFS_CURING_H
#define COORDFS_CURING_H

// FUSE over io_uring (Linux 6.14+, FUSE protocol 7.42) for FuseKit's ring transport, over liburing
// (Debian's liburing-dev 2.3). Only opaque rings cross into Swift: liburing's own copy of
// <linux/io_uring.h> clashes with the system's in Swift's module map, so its types stay in ring.c.
// The kernel's ABI is newer than libfuse 3.14 and the system's <linux/fuse.h>, so its few structures
// are declared here from include/uapi/linux/fuse.h.
#include <stdint.h>
#include <sys/uio.h>

/* FUSE_OVER_IO_URING (1ULL << 41): in fuse_init_in/out.flags2. */
static const uint32_t CURING_FUSE_OVER_IO_URING_FLAGS2 = 1u << 9;

enum {
    CURING_CMD_REGISTER = 1,          /* FUSE_IO_URING_CMD_REGISTER */
    CURING_CMD_COMMIT_AND_FETCH = 2,  /* FUSE_IO_URING_CMD_COMMIT_AND_FETCH */
};

/* struct fuse_uring_ent_in_out */
struct curing_ent_in_out {
    uint64_t flags;
    uint64_t commit_id;   /* the request's unique; given back with the commit */
    uint32_t payload_sz;  /* bytes of the payload buffer in use (request, then reply) */
    uint32_t padding;
    uint64_t reserved;
};

/* struct fuse_uring_req_header: the entry's header buffer. */
struct curing_req_header {
    char in_out[128];     /* fuse_in_header, then the reply's fuse_out_header */
    char op_in[128];      /* the operation's own header (fuse_write_in, fuse_open_in, ...) */
    struct curing_ent_in_out ring_ent_in_out;
};

/* struct fuse_uring_cmd_req: in the SQE's 80-byte command area (SQE128). */
struct curing_cmd_req {
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};

typedef struct curing_ring curing_ring;

/* A ring whose SQEs are 128 bytes (the fuse command needs them), with `entries` submission slots and
   room for `completions` completions. `cooperative`: task work without an interrupt
   (IORING_SETUP_COOP_TASKRUN and TASKRUN_FLAG; a kernel without them gets a ring without them).
   NULL with *error set (a negative errno) when io_uring cannot be set up. */
curing_ring *curing_create(unsigned entries, unsigned completions, int cooperative, int *error);
void curing_destroy(curing_ring *ring);

/* Whether the ring runs its task work cooperatively (only when its task enters the kernel). */
int curing_is_cooperative(curing_ring *ring);

/* Queues one fuse command (REGISTER with the entry's two buffers, or COMMIT_AND_FETCH of
   commit_id) and submits it. 1, or a negative errno. */
int curing_submit_fuse_cmd(curing_ring *ring, int devfd, uint32_t op, uint16_t qid, uint64_t commit_id,
                           const struct iovec *iov, uint64_t user_data);

/* Queues one fuse command without submitting it: 0, or -EBUSY when the submission queue is full. */
int curing_queue_fuse_cmd(curing_ring *ring, int devfd, uint32_t op, uint16_t qid, uint64_t commit_id,
                          const struct iovec *iov, uint64_t user_data);

/* Queues a one-shot poll of `fd` for input without submitting it: its completion (the poll's
   events, or a negative errno) carries `user_data`; the kernel looks at `fd` when it is submitted
   and completes it at once when input is already there. 0, or -EBUSY when the submission queue is
   full. */
int curing_queue_poll_in(curing_ring *ring, int fd, uint64_t user_data);

/* Submits what is queued, in one system call: how many, or a negative errno. */
int curing_submit(curing_ring *ring);

/* Submits a no-op whose completion carries `user_data` (it completes at once, in the caller's
   system call: a wake-up for a thread waiting in `curing_wait`). 1, or a negative errno. */
int curing_submit_nop(curing_ring *ring, uint64_t user_data);

/* Takes one completion if there is one: 1 (user_data and res set), else 0. Never blocks; enters the
   kernel (without waiting) only when the ring says that task work of its caller is pending. */
int curing_take_cqe(curing_ring *ring, uint64_t *user_data, int32_t *res);

/* Blocks in io_uring_enter until the ring has a completion (running the caller's task work, which
   delivers fetched requests). 0, or a negative errno (-EINTR). */
int curing_wait(curing_ring *ring);

/* Makes what was queued visible to the kernel without entering it: how many submissions wait to be
   taken (by the next io_uring_enter on the ring, whoever makes it). Under the caller's submission
   lock, as every queueing. */
unsigned curing_flush(curing_ring *ring);

/* One io_uring_enter that submits `to_submit` (what `curing_flush` returned) and blocks until the
   ring has a completion, as `curing_wait`: a commit and the wait for the next request in one system
   call. Not under the submission lock (it blocks). 0, or a negative errno (-EINTR). */
int curing_submit_and_wait(curing_ring *ring, unsigned to_submit);

/* Whether a look would find something: a completion, or task work the ring flags for its caller. */
int curing_has_news(curing_ring *ring);

/* A small ring of its own for waking a ring's waiter from any thread without touching that ring's
   submission queue: `curing_send_wake` posts a completion carrying `user_data` into the ring `target`
   (IORING_OP_MSG_RING), which wakes a thread waiting there. NULL with *error set when the kernel has
   no io_uring. Callers serialise their use of one waker. */
curing_ring *curing_create_waker(int *error);
int curing_send_wake(curing_ring *waker, curing_ring *target, uint64_t user_data);

/* Pins the calling thread to `cpu` (sched_setaffinity): 0 or a negative errno. */
int curing_pin_to_cpu(int cpu);
/* Lets the calling thread run on every CPU again: 0 or a negative errno. */
int curing_unpin(void);

/* Writes a FUSE_NOTIFY_RETRIEVE of nothing (size 0) of inode `nodeid` to /dev/fuse. When the kernel
   holds that inode and it is a regular file (else -ENOENT or -EINVAL), it answers with a
   FUSE_NOTIFY_REPLY request whose unique id is `notify_unique`, queued like any request (through
   io_uring: on the queue of the CPU the calling thread runs on), and the write returns at once,
   waiting for no one. 0 or a negative errno. */
int curing_notify_retrieve(int devfd, uint64_t nodeid, uint64_t notify_unique);

#endif
