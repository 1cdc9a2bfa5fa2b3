// See include/csqliteshm.h.
#define _GNU_SOURCE
#include "csqliteshm.h"

#include <errno.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

typedef struct ShmFile {
    sqlite3_file base;      /* pMethods: shimMethods once the real file is open */
    int mainDatabase;       /* a main database opened for writing (whose WAL index SQLite maps) */
    sqlite3_file *real;     /* the real VFS's file, allocated right after this struct */
} ShmFile;

static sqlite3_vfs shimVfs;
static sqlite3_vfs *realVfs;
/* One table per version the real files' methods may have: SQLite calls only what a version has. */
static sqlite3_io_methods shimMethods[3];
#define REAL(f) (((ShmFile *)(f))->real)

static int shimClose(sqlite3_file *f) {
    ShmFile *s = (ShmFile *)f;
    return s->real->pMethods ? s->real->pMethods->xClose(s->real) : SQLITE_OK;
}
static int shimRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int shimWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) { return REAL(f)->pMethods->xWrite(REAL(f), b, n, o); }
static int shimTruncate(sqlite3_file *f, sqlite3_int64 size) { return REAL(f)->pMethods->xTruncate(REAL(f), size); }
static int shimSync(sqlite3_file *f, int flags) { return REAL(f)->pMethods->xSync(REAL(f), flags); }
static int shimFileSize(sqlite3_file *f, sqlite3_int64 *size) { return REAL(f)->pMethods->xFileSize(REAL(f), size); }
static int shimLock(sqlite3_file *f, int level) { return REAL(f)->pMethods->xLock(REAL(f), level); }
static int shimUnlock(sqlite3_file *f, int level) { return REAL(f)->pMethods->xUnlock(REAL(f), level); }
static int shimCheckReservedLock(sqlite3_file *f, int *out) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out); }
static int shimFileControl(sqlite3_file *f, int op, void *arg) { return REAL(f)->pMethods->xFileControl(REAL(f), op, arg); }
static int shimSectorSize(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int shimDeviceCharacteristics(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int shimShmLock(sqlite3_file *f, int offset, int n, int flags) { return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags); }
static void shimShmBarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int shimShmUnmap(sqlite3_file *f, int deleteFlag) { return REAL(f)->pMethods->xShmUnmap(REAL(f), deleteFlag); }
static int shimFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) { return REAL(f)->pMethods->xFetch(REAL(f), o, n, pp); }
static int shimUnfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/// The real map, then every page of region `region` faulted in writable (MADV_POPULATE_WRITE, Linux
/// 5.14+), which has the file system allocate its blocks, before SQLite stores into it. Where the
/// disk cannot hold them the kernel says so (EFAULT: "a SIGBUS would have been generated") instead
/// of killing the process. (Not through a descriptor of the `-shm` file of our own: closing one
/// would drop the process's POSIX locks on it, SQLite's among them, and another connection would
/// take itself for the first, truncate the file and leave this mapping past its end.)
static int shimShmMap(sqlite3_file *f, int region, int size, int extend, void volatile **pp) {
    ShmFile *s = (ShmFile *)f;
    int rc = s->real->pMethods->xShmMap(s->real, region, size, extend, pp);
    /* The real map could not grow the file (its one-byte writes): a full disk, said as one. */
    if (rc == SQLITE_IOERR_SHMSIZE) return SQLITE_FULL;
    if (rc != SQLITE_OK || *pp == NULL || !s->mainDatabase) return rc;
    int r;
    do {
        r = madvise((void *)*pp, (size_t)size, MADV_POPULATE_WRITE);
    } while (r != 0 && errno == EINTR);
    if (r != 0 && (errno == EFAULT || errno == ENOMEM)) {
        /* SQLite keeps the pointer it is given (wal.c stores it for later use): give none. */
        *pp = NULL;
        return SQLITE_FULL;
    }
    return rc;  /* allocated; or EINVAL: a kernel without MADV_POPULATE_WRITE, a read-only mapping */
}

static int shimOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
    (void)vfs;
    ShmFile *s = (ShmFile *)f;
    memset(s, 0, sizeof(*s));
    s->real = (sqlite3_file *)(s + 1);
    int rc = realVfs->xOpen(realVfs, name, s->real, flags, outFlags);
    if (rc != SQLITE_OK || s->real->pMethods == NULL) {
        s->base.pMethods = NULL;
        return rc;
    }
    /* A read-only connection may share a mapping it cannot write (MADV_POPULATE_WRITE would fail
       there as for a full disk): the process's writing connection allocates the regions. */
    s->mainDatabase = (flags & SQLITE_OPEN_MAIN_DB) != 0 && (flags & SQLITE_OPEN_READONLY) == 0;
    int version = s->real->pMethods->iVersion;
    s->base.pMethods = &shimMethods[(version < 1 ? 1 : version > 3 ? 3 : version) - 1];
    return rc;
}

static int shimDelete(sqlite3_vfs *v, const char *n, int d) { (void)v; return realVfs->xDelete(realVfs, n, d); }
static int shimAccess(sqlite3_vfs *v, const char *n, int flags, int *out) { (void)v; return realVfs->xAccess(realVfs, n, flags, out); }
static int shimFullPathname(sqlite3_vfs *v, const char *n, int size, char *out) { (void)v; return realVfs->xFullPathname(realVfs, n, size, out); }
static void *shimDlOpen(sqlite3_vfs *v, const char *n) { (void)v; return realVfs->xDlOpen(realVfs, n); }
static void shimDlError(sqlite3_vfs *v, int n, char *out) { (void)v; realVfs->xDlError(realVfs, n, out); }
static void (*shimDlSym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return realVfs->xDlSym(realVfs, h, s); }
static void shimDlClose(sqlite3_vfs *v, void *h) { (void)v; realVfs->xDlClose(realVfs, h); }
static int shimRandomness(sqlite3_vfs *v, int n, char *out) { (void)v; return realVfs->xRandomness(realVfs, n, out); }
static int shimSleep(sqlite3_vfs *v, int us) { (void)v; return realVfs->xSleep(realVfs, us); }
static int shimCurrentTime(sqlite3_vfs *v, double *out) { (void)v; return realVfs->xCurrentTime(realVfs, out); }
static int shimGetLastError(sqlite3_vfs *v, int n, char *out) { (void)v; return realVfs->xGetLastError(realVfs, n, out); }
static int shimCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *out) { (void)v; return realVfs->xCurrentTimeInt64(realVfs, out); }

static int registered = SQLITE_ERROR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void registerOnce(void) {
    realVfs = sqlite3_vfs_find(NULL);
    if (realVfs == NULL || realVfs->iVersion < 2) return;
    const sqlite3_io_methods all = {
        .iVersion = 3,
        .xClose = shimClose, .xRead = shimRead, .xWrite = shimWrite, .xTruncate = shimTruncate, .xSync = shimSync,
        .xFileSize = shimFileSize, .xLock = shimLock, .xUnlock = shimUnlock, .xCheckReservedLock = shimCheckReservedLock,
        .xFileControl = shimFileControl, .xSectorSize = shimSectorSize, .xDeviceCharacteristics = shimDeviceCharacteristics,
        .xShmMap = shimShmMap, .xShmLock = shimShmLock, .xShmBarrier = shimShmBarrier, .xShmUnmap = shimShmUnmap,
        .xFetch = shimFetch, .xUnfetch = shimUnfetch,
    };
    for (int v = 1; v <= 3; v++) {
        shimMethods[v - 1] = all;
        shimMethods[v - 1].iVersion = v;
    }
    shimVfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(ShmFile) + realVfs->szOsFile,
        .mxPathname = realVfs->mxPathname,
        .zName = "coordfs-unix-shm",
        .xOpen = shimOpen, .xDelete = shimDelete, .xAccess = shimAccess, .xFullPathname = shimFullPathname,
        .xDlOpen = shimDlOpen, .xDlError = shimDlError, .xDlSym = shimDlSym, .xDlClose = shimDlClose,
        .xRandomness = shimRandomness, .xSleep = shimSleep, .xCurrentTime = shimCurrentTime,
        .xGetLastError = shimGetLastError, .xCurrentTimeInt64 = shimCurrentTimeInt64,
    };
    registered = sqlite3_vfs_register(&shimVfs, 1);
}

int csqliteshm_register_default(void) {
    pthread_once(&once, registerOnce);
    return registered;
}
