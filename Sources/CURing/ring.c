// See include/curing.h.
#include "curing.h"

#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/eventfd.h>

struct curing_ring { struct io_uring ring; };

curing_ring *curing_create(unsigned entries, int *error) {
    curing_ring *r = calloc(1, sizeof *r);
    if (!r) { *error = -ENOMEM; return NULL; }
    int rc = io_uring_queue_init(entries, &r->ring, IORING_SETUP_SQE128);
    if (rc < 0) { free(r); *error = rc; return NULL; }
    return r;
}

void curing_destroy(curing_ring *r) {
    if (!r) return;
    io_uring_queue_exit(&r->ring);
    free(r);
}

int curing_submit_fuse_cmd(curing_ring *r, int devfd, uint32_t op, uint16_t qid, uint64_t commit_id,
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
    return io_uring_submit(&r->ring);
}

int curing_take_cqe(curing_ring *r, uint64_t *user_data, int32_t *res) {
    struct io_uring_cqe *cqe = NULL;
    if (io_uring_peek_cqe(&r->ring, &cqe) != 0 || !cqe) return 0;
    *user_data = io_uring_cqe_get_data64(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    return 1;
}

int curing_register_eventfd(curing_ring *r, int fd) { return io_uring_register_eventfd(&r->ring, fd); }

int curing_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
