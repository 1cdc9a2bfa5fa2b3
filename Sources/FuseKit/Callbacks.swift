import CFuse3
import Glibc

// The C entry points libfuse calls on its worker threads. They unpack the request, find the filesystem
// through the session's userdata, and hand over. Kept out of main.swift on purpose: closures written in
// top-level code are main-actor isolated, and libfuse calls these on arbitrary threads.

/// The session's file system, counting the request as one of `operation` (`FuseRequestCounters`).
@inline(__always)
private func fs(_ req: fuse_req_t?, _ operation: FuseOperation) -> any FuseFileSystem {
    let state = Unmanaged<SessionState>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    state.requests.count(operation)
    return state.fileSystem
}

@inline(__always)
private func info(_ fi: UnsafeMutablePointer<fuse_file_info>?) -> FileInfo { FileInfo(fi) }

func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
        guard let userdata, let conn else { return }
        let state = Unmanaged<SessionState>.fromOpaque(userdata).takeUnretainedValue()
        var c = ConnectionInfo(
            capable: Capabilities(rawValue: conn.pointee.capable), want: Capabilities(rawValue: conn.pointee.want),
            maxWrite: conn.pointee.max_write, maxReadahead: conn.pointee.max_readahead,
            maxBackground: conn.pointee.max_background, congestionThreshold: conn.pointee.congestion_threshold,
            timeGranularity: conn.pointee.time_gran)
        state.fileSystem.initialize(connection: &c)
        conn.pointee.want = c.want.rawValue & conn.pointee.capable
        // Requests are read into memory, never spliced: the session's I/O hooks look at each one (the
        // spinning reader at its opcode; `TmpfileRequest` turns a FUSE_TMPFILE into a create).
        conn.pointee.want &= ~UInt32(FUSE_CAP_SPLICE_READ)
        // A ring entry takes its request and reply in memory: nothing is spliced.
        if state.ringWillBeUsed {
            conn.pointee.want &= ~UInt32(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE)
        }
        state.sayTransport()
        conn.pointee.max_write = c.maxWrite
        conn.pointee.max_readahead = c.maxReadahead
        conn.pointee.max_background = c.maxBackground
        conn.pointee.congestion_threshold = c.congestionThreshold
        conn.pointee.time_gran = c.timeGranularity
        state.initialized()
    }
    ops.destroy = { userdata in
        guard let userdata else { return }
        Unmanaged<SessionState>.fromOpaque(userdata).takeUnretainedValue().fileSystem.destroy()
    }
    ops.lookup = { req, parent, name in
        fs(req, .lookup).lookup(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!))
    }
    ops.forget = { req, ino, n in
        fs(req, .forget).forget(InodeID(rawValue: ino), count: n)
        fuse_reply_none(req)
    }
    ops.forget_multi = { req, count, forgets in
        let f = fs(req, .forget)
        if let forgets {
            for i in 0..<count { f.forget(InodeID(rawValue: forgets[i].ino), count: forgets[i].nlookup) }
        }
        fuse_reply_none(req)
    }
    ops.getattr = { req, ino, fi in
        fs(req, .getattr).getattr(Request(req!), inode: InodeID(rawValue: ino), file: fi.map { FileInfo($0) })
    }
    ops.setattr = { req, ino, attr, toSet, fi in
        fs(req, .setattr).setattr(Request(req!), inode: InodeID(rawValue: ino), attributes: attr!.pointee,
                        changing: SetAttributes(rawValue: toSet), file: fi.map { FileInfo($0) })
    }
    ops.readlink = { req, ino in fs(req, .readlink).readlink(Request(req!), inode: InodeID(rawValue: ino)) }
    ops.mknod = { req, parent, name, mode, rdev in
        fs(req, .mknod).mknod(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!), mode: mode, device: rdev)
    }
    ops.mkdir = { req, parent, name, mode in
        fs(req, .mkdir).mkdir(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!), mode: mode)
    }
    ops.unlink = { req, parent, name in
        fs(req, .unlink).unlink(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!))
    }
    ops.rmdir = { req, parent, name in
        fs(req, .rmdir).rmdir(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!))
    }
    ops.symlink = { req, target, parent, name in
        fs(req, .symlink).symlink(Request(req!), target: target!, parent: InodeID(rawValue: parent), name: FileName(name!))
    }
    ops.rename = { req, parent, name, newparent, newname, flags in
        fs(req, .rename).rename(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!),
                       newParent: InodeID(rawValue: newparent), newName: FileName(newname!), flags: UInt32(flags))
    }
    ops.link = { req, ino, newparent, newname in
        fs(req, .link).link(Request(req!), inode: InodeID(rawValue: ino), newParent: InodeID(rawValue: newparent), newName: FileName(newname!))
    }
    ops.open = { req, ino, fi in fs(req, .open).open(Request(req!), inode: InodeID(rawValue: ino), file: info(fi)) }
    ops.read = { req, ino, size, off, fi in
        fs(req, .read).read(Request(req!), inode: InodeID(rawValue: ino), size: size, offset: off, file: info(fi))
    }
    ops.write_buf = { req, ino, bufv, off, fi in
        fs(req, .write).write(Request(req!), inode: InodeID(rawValue: ino), data: IncomingData(bufv: bufv!), offset: off, file: info(fi))
    }
    ops.flush = { req, ino, fi in fs(req, .flush).flush(Request(req!), inode: InodeID(rawValue: ino), file: info(fi)) }
    ops.release = { req, ino, fi in fs(req, .release).release(Request(req!), inode: InodeID(rawValue: ino), file: info(fi)) }
    ops.fsync = { req, ino, datasync, fi in
        fs(req, .fsync).fsync(Request(req!), inode: InodeID(rawValue: ino), dataOnly: datasync != 0, file: info(fi))
    }
    ops.opendir = { req, ino, fi in fs(req, .opendir).opendir(Request(req!), inode: InodeID(rawValue: ino), file: info(fi)) }
    ops.readdir = { req, ino, size, off, fi in
        fs(req, .readdir).readdir(Request(req!), inode: InodeID(rawValue: ino), size: size, offset: off, file: info(fi), plus: false)
    }
    ops.readdirplus = { req, ino, size, off, fi in
        fs(req, .readdirplus).readdir(Request(req!), inode: InodeID(rawValue: ino), size: size, offset: off, file: info(fi), plus: true)
    }
    ops.releasedir = { req, ino, fi in fs(req, .releasedir).releasedir(Request(req!), inode: InodeID(rawValue: ino), file: info(fi)) }
    ops.fsyncdir = { req, ino, datasync, fi in
        fs(req, .fsyncdir).fsyncdir(Request(req!), inode: InodeID(rawValue: ino), dataOnly: datasync != 0, file: info(fi))
    }
    ops.statfs = { req, ino in fs(req, .statfs).statfs(Request(req!), inode: InodeID(rawValue: ino)) }
    ops.setxattr = { req, ino, name, value, size, flags in
        fs(req, .setxattr).setxattr(Request(req!), inode: InodeID(rawValue: ino), name: FileName(name!),
                         value: UnsafeRawBufferPointer(start: value, count: size), flags: flags)
    }
    ops.getxattr = { req, ino, name, size in
        fs(req, .getxattr).getxattr(Request(req!), inode: InodeID(rawValue: ino), name: FileName(name!), size: size)
    }
    ops.listxattr = { req, ino, size in fs(req, .listxattr).listxattr(Request(req!), inode: InodeID(rawValue: ino), size: size) }
    ops.removexattr = { req, ino, name in
        fs(req, .removexattr).removexattr(Request(req!), inode: InodeID(rawValue: ino), name: FileName(name!))
    }
    ops.access = { req, ino, mask in fs(req, .access).access(Request(req!), inode: InodeID(rawValue: ino), mask: mask) }
    ops.create = { req, parent, name, mode, fi in
        if TmpfileRequest.isTmpfile(name: name) {
            return fs(req, .tmpfile).tmpfile(Request(req!), parent: InodeID(rawValue: parent), mode: mode, file: info(fi))
        }
        fs(req, .create).create(Request(req!), parent: InodeID(rawValue: parent), name: FileName(name!), mode: mode, file: info(fi))
    }
    ops.fallocate = { req, ino, mode, off, len, fi in
        fs(req, .fallocate).fallocate(Request(req!), inode: InodeID(rawValue: ino), mode: mode, offset: off, length: len, file: info(fi))
    }
    ops.copy_file_range = { req, inoIn, offIn, fiIn, inoOut, offOut, fiOut, len, flags in
        fs(req, .copyFileRange).copyFileRange(Request(req!), input: InodeID(rawValue: inoIn), inputOffset: offIn, inputFile: info(fiIn),
                              output: InodeID(rawValue: inoOut), outputOffset: offOut, outputFile: info(fiOut),
                              length: len, flags: flags)
    }
    ops.lseek = { req, ino, off, whence, fi in
        fs(req, .lseek).lseek(Request(req!), inode: InodeID(rawValue: ino), offset: off, whence: whence, file: info(fi))
    }
    return ops
}

/// FUSE_TMPFILE (opcode 51, Linux 6.7) is newer than libfuse 3.14, which answers it ENOSYS. Its
/// request is a create's (fuse_create_in, then the name the kernel gives an unnamed file's dentry:
/// "/", which no create can carry, a slash never being part of a name). So the session's I/O hooks
/// turn its opcode into FUSE_CREATE (35) before libfuse reads it, from /dev/fuse (`passthroughIO`) and
/// from the ring (`RingTransport`), and the create callback hands a create of "/" to
/// `FuseFileSystem.tmpfile`. The reply is a create's, as the kernel expects for FUSE_TMPFILE.
enum TmpfileRequest {
    static let tmpfileOpcode: UInt32 = 51
    static let createOpcode: UInt32 = 35

    /// Turns the request at `bytes` (fuse_in_header first, `length` bytes) into a create if it is a
    /// FUSE_TMPFILE.
    @inline(__always)
    static func readAsCreate(_ bytes: UnsafeMutableRawPointer?, length: Int) {
        guard let bytes, length >= 40, bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self) == tmpfileOpcode else { return }
        bytes.storeBytes(of: createOpcode, toByteOffset: 4, as: UInt32.self)
    }

    /// A create of "/": a FUSE_TMPFILE read as a create.
    @inline(__always)
    static func isTmpfile(name: UnsafePointer<CChar>?) -> Bool {
        guard let name else { return false }
        return name[0] == 0x2F && name[1] == 0
    }
}
