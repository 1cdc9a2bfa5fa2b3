// See include/curing.h.
#define _GNU_SOURCE
#include "curing.h"

#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sched.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <poll.h>

struct curing_ring { struct io_uring ring; unsigned flags; };

curing_ring *curing_create(unsigned entries, unsigned completions, int cooperative, int *error) {
    curing_ring *r = calloc(1, sizeof *r);
    if (!r) { *error = -ENOMEM; return NULL; }
    unsigned base = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
    unsigned coop = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    int rc = -EINVAL;
    for (int attempt = cooperative ? 0 : 1; attempt < 2; attempt++) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        p.flags = base | (attempt == 0 ? coop : 0);
        p.cq_entries = completions;
        rc = io_uring_queue_init_params(entries, &r->ring, &p);
        if (rc == 0) { r->flags = p.flags; break; }
        if (rc != -EINVAL) break;  /* EINVAL: a kernel before 5.19 has no cooperative task work */
    }
    if (rc < 0) { free(r); *error = rc; return NULL; }
    return r;
}

void curing_destroy(curing_ring *r) {
    if (!r) return;
    io_uring_queue_exit(&r->ring);
    free(r);
}

int curing_is_cooperative(curing_ring *r) { return (r->flags & IORING_SETUP_COOP_TASKRUN) != 0; }

int curing_submit_fuse_cmd(curing_ring *r, int devfd, uint32_t op, uint16_t qid, uint64_t commit_id,
                           const struct iovec *iov, uint64_t user_data) {
    int rc = curing_queue_fuse_cmd(r, devfd, op, qid, commit_id, iov, user_data);
    return rc < 0 ? rc : io_uring_submit(&r->ring);
}

int curing_submit(curing_ring *r) { return io_uring_submit(&r->ring); }

int curing_queue_fuse_cmd(curing_ring *r, int devfd, uint32_t op, uint16_t qid, uint64_t commit_id,
                          const struct iovec *iov, uint64_t user_data) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) return -EBUSY;
    memset(sqe, 0, 128);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = devfd;
    sqe->cmd_op = op;
    sqe->addr = (uint64_t)(uintptr_t)iov;
    sqe->len = 2;
    struct curing_cmd_req *req = (struct curing_cmd_req *)sqe->cmd;
    req->qid = qid;
    req->commit_id = commit_id;
    io_uring_sqe_set_data64(sqe, user_data);
    return 0;
}

int curing_queue_poll_in(curing_ring *r, int fd, uint64_t user_data) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) return -EBUSY;
    memset(sqe, 0, 128);
    io_uring_prep_poll_add(sqe, fd, POLLIN);
    io_uring_sqe_set_data64(sqe, user_data);
    return 0;
}

int curing_submit_nop(curing_ring *r, uint64_t user_data) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) return -EBUSY;
    memset(sqe, 0, 128);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, user_data);
    return io_uring_submit(&r->ring);
}

int curing_take_cqe(curing_ring *r, uint64_t *user_data, int32_t *res) {
    if (io_uring_cq_ready(&r->ring) == 0) {
        /* Cooperative task work (or completions that overflowed) waits for this task to enter the
           kernel: the ring says so in its flags, and one enter without waiting runs it. */
        if (!(IO_URING_READ_ONCE(*r->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) return 0;
        io_uring_get_events(&r->ring);
        if (io_uring_cq_ready(&r->ring) == 0) return 0;
    }
    struct io_uring_cqe *cqe = NULL;
    if (io_uring_peek_cqe(&r->ring, &cqe) != 0 || !cqe) return 0;
    *user_data = io_uring_cqe_get_data64(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    return 1;
}

int curing_wait(curing_ring *r) {
    struct io_uring_cqe *cqe = NULL;
    return io_uring_wait_cqe(&r->ring, &cqe);
}

int curing_pin_to_cpu(int cpu) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return -EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
}

int curing_unpin(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    long n = sysconf(_SC_NPROCESSORS_CONF);
    for (long c = 0; c < n && c < CPU_SETSIZE; c++) CPU_SET(c, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : -errno;
}

int curing_notify_retrieve(int devfd, uint64_t nodeid, uint64_t notify_unique) {
    struct {
        struct { uint32_t len; int32_t error; uint64_t unique; } out;   /* fuse_out_header */
        struct { uint64_t notify_unique, nodeid, offset; uint32_t size, padding; } arg;  /* fuse_notify_retrieve_out */
    } message;
    memset(&message, 0, sizeof message);
    message.out.len = sizeof message;
    message.out.error = 5;           /* FUSE_NOTIFY_RETRIEVE */
    message.arg.notify_unique = notify_unique;
    message.arg.nodeid = nodeid;
    ssize_t n = write(devfd, &message, sizeof message);
    if (n < 0) return -errno;
    return n == (ssize_t)sizeof message ? 0 : -EIO;
}

unsigned curing_flush(curing_ring *r) {
    /* liburing's own flush of the submission queue (without SQPOLL), kept apart from its enter. */
    struct io_uring_sq *sq = &r->ring.sq;
    unsigned tail = sq->sqe_tail;
    if (sq->sqe_head != tail) {
        sq->sqe_head = tail;
        io_uring_smp_store_release(sq->ktail, tail);
    }
    return tail - IO_URING_READ_ONCE(*sq->khead);
}

int curing_submit_and_wait(curing_ring *r, unsigned to_submit) {
    if (io_uring_cq_ready(&r->ring) > 0 && to_submit == 0) return 0;
    int rc = (int)syscall(__NR_io_uring_enter, r->ring.ring_fd, to_submit, 1, IORING_ENTER_GETEVENTS, NULL, 0);
    return rc < 0 ? -errno : 0;
}

int curing_has_news(curing_ring *r) {
    return io_uring_cq_ready(&r->ring) > 0
        || (IO_URING_READ_ONCE(*r->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

curing_ring *curing_create_waker(int *error) {
    curing_ring *r = calloc(1, sizeof *r);
    if (!r) { *error = -ENOMEM; return NULL; }
    int rc = io_uring_queue_init(4, &r->ring, 0);
    if (rc < 0) { free(r); *error = rc; return NULL; }
    return r;
}

int curing_send_wake(curing_ring *waker, curing_ring *target, uint64_t user_data) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&waker->ring);
    if (!sqe) return -EBUSY;
    io_uring_prep_msg_ring(sqe, target->ring.ring_fd, 0, user_data, 0);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;   /* the waker's own ring keeps nothing of a sent wake */
    int rc = io_uring_submit(&waker->ring);
    /* A failed message leaves a completion here (its error): take it. */
    struct io_uring_cqe *cqe = NULL;
    while (io_uring_peek_cqe(&waker->ring, &cqe) == 0 && cqe) {
        if (cqe->res < 0) rc = cqe->res;
        io_uring_cqe_seen(&waker->ring, cqe);
    }
    return rc < 0 ? rc : 0;
}
