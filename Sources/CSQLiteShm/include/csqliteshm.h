#ifndef COORDFS_CSQLITESHM_H
#define COORDFS_CSQLITESHM_H

// A SQLite VFS over the system's default ("unix") whose WAL index (the database's `-shm` file,
// which SQLite maps into memory) never has holes. SQLite grows that file by writing one byte at the
// end of each memory page of a new region; where the file system's blocks are smaller than a page
// (ext4 with 1 KiB blocks, as mke2fs makes every file system under 512 MiB), the rest of the page
// stays a hole, and the first store into it through the mapping needs a block: on a full disk the
// kernel cannot give one and the process dies of SIGBUS. This VFS has every block of a region
// allocated (its pages faulted in writable, MADV_POPULATE_WRITE) as soon as SQLite maps it, before
// SQLite touches it; when the disk cannot hold them, the map fails with SQLITE_FULL (the
// transaction fails, "database or disk is full") and SQLite keeps no pointer into the region.

/// Registers the VFS as SQLite's default for this process (once; later calls do nothing).
/// Returns SQLITE_OK or SQLite's error code.
int csqliteshm_register_default(void);

#endif
