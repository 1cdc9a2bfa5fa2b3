#ifndef COORDFS_CFUSE3_SHIM_H
#define COORDFS_CFUSE3_SHIM_H

// libfuse 3.14's low-level API. Do not define _FILE_OFFSET_BITS here: it clashes with Glibc's module
// (x86_64 is LP64, off_t is 64-bit regardless).
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <fuse_opt.h>

// Macros and variadics that Swift cannot import, as static inline functions.
static inline struct fuse_args cfuse_args_init(int argc, char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(argc, argv);
    return a;
}

#endif
