import CLinux
import Glibc
// retryingEINTR, MountInfo and the small file helpers (C-free, for the client side too).
@_exported import Linux

/// Linux system calls that Swift's Glibc module hides (GNU extensions), for the modules that do not
/// import C themselves (this module's `CLinux` declares them). Each returns -1 and sets errno on
/// failure, like the C call.
public enum LinuxCalls {
    public static let O_PATH: Int32 = CLINUX_O_PATH
    public static let O_DIRECT: Int32 = CLINUX_O_DIRECT
    public static let AT_EMPTY_PATH: Int32 = CLINUX_AT_EMPTY_PATH
    public static let UTIME_NOW: Int = CLINUX_UTIME_NOW
    public static let UTIME_OMIT: Int = CLINUX_UTIME_OMIT
    public static let FALLOC_FL_KEEP_SIZE: Int32 = CLINUX_FALLOC_FL_KEEP_SIZE
    public static let FALLOC_FL_PUNCH_HOLE: Int32 = CLINUX_FALLOC_FL_PUNCH_HOLE
    public static let renameNoReplace: UInt32 = CLINUX_RENAME_NOREPLACE
    public static let renameExchange: UInt32 = CLINUX_RENAME_EXCHANGE
    public static let renameWhiteout: UInt32 = CLINUX_RENAME_WHITEOUT

    /// `fallocate(2)`.
    public static func fallocate(_ fd: Int32, _ mode: Int32, _ offset: Int, _ length: Int) -> Int32 {
        clinux_fallocate(fd, mode, Int64(offset), Int64(length))
    }
    /// The file system type of `fd`'s file (`statfs` f_type, as in linux/magic.h), or -1.
    public static func fileSystemType(_ fd: Int32) -> Int { clinux_fs_type(fd) }
    /// The uid owning the TCP socket on this machine whose own address is `address`:`port` and
    /// whose peer is `peer`:`peerPort` (the other end of a loopback connection: pass the
    /// connection's remote address as `address` and its local one as `peer`), by sock_diag, or
    /// from `/proc/net/tcp` (`tcp6`) where sock_diag does not answer (a kernel without
    /// `tcp_diag`); nil when there is no such socket here (a peer on another machine, or gone).
    /// `family` AF_INET (addresses of 4 bytes) or AF_INET6 (16), ports in host byte order.
    public static func tcpSocketOwner(family: Int32, address: [UInt8], port: UInt16, peer: [UInt8], peerPort: UInt16) -> UInt32? {
        let n = family == AF_INET6 ? 16 : 4
        guard address.count == n, peer.count == n else { return nil }
        let uid = address.withUnsafeBytes { a in
            peer.withUnsafeBytes { p in clinux_tcp_socket_uid(family, a.baseAddress, port.bigEndian, p.baseAddress, peerPort.bigEndian) }
        }
        return uid >= 0 ? UInt32(truncatingIfNeeded: uid) : tcpSocketOwnerInProcNet(family: family, address: address, port: port, peer: peer, peerPort: peerPort)
    }
    /// `tcpSocketOwner` from `/proc/net/tcp` (or `tcp6`): the row whose own address is
    /// `address`:`port` and whose peer is `peer`:`peerPort`.
    private static func tcpSocketOwnerInProcNet(family: Int32, address: [UInt8], port: UInt16, peer: [UInt8], peerPort: UInt16) -> UInt32? {
        /// An address as the kernel prints it there: each 32-bit word in host order, %08X; the port %04X.
        func hex(_ address: [UInt8], _ port: UInt16) -> String {
            func padded(_ s: String, _ width: Int) -> String { String(repeating: "0", count: max(0, width - s.count)) + s }
            var words = ""
            for i in stride(from: 0, to: address.count, by: 4) {
                let word = address[i..<i + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
                words += padded(String(word, radix: 16, uppercase: true), 8)
            }
            return words + ":" + padded(String(port, radix: 16, uppercase: true), 4)
        }
        let own = hex(address, port), other = hex(peer, peerPort)
        guard let table = readWholeFile(family == AF_INET6 ? "/proc/net/tcp6" : "/proc/net/tcp") else { return nil }
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            if fields.count > 7, fields[1] == own, fields[2] == other { return UInt32(fields[7]) }
        }
        return nil
    }
    /// The uid owning the other end of the TCP connection `fd` (an accepted socket) on this
    /// machine, from the connection's own addresses (`tcpSocketOwner`); nil when the peer is on
    /// another machine or not known.
    public static func tcpPeerOwner(_ fd: Int32) -> UInt32? {
        guard let remote = socketAddress(fd, peer: true), let local = socketAddress(fd, peer: false), remote.family == local.family else { return nil }
        return tcpSocketOwner(family: remote.family, address: remote.address, port: remote.port, peer: local.address, peerPort: local.port)
    }
    /// Whether the other end of the connection `fd` has a loopback address (127.0.0.0/8, ::1, or
    /// an IPv4 loopback address mapped into IPv6): a process on this machine, whatever its owner.
    public static func tcpPeerIsLoopback(_ fd: Int32) -> Bool {
        guard let remote = socketAddress(fd, peer: true) else { return false }
        let a = remote.address
        if remote.family == AF_INET { return a.first == 127 }
        guard a.count == 16 else { return false }
        if a[0..<15].allSatisfy({ $0 == 0 }) && a[15] == 1 { return true }
        return a[0..<10].allSatisfy({ $0 == 0 }) && a[10] == 0xff && a[11] == 0xff && a[12] == 127
    }
    /// The socket's own (`peer` false) or its peer's address: family, address bytes (4 or 16), port
    /// in host byte order; nil for another family or a socket without one.
    private static func socketAddress(_ fd: Int32, peer: Bool) -> (family: Int32, address: [UInt8], port: UInt16)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        guard withUnsafeMutablePointer(to: &storage, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length) } }) == 0 else { return nil }
        return withUnsafePointer(to: &storage) { p -> (Int32, [UInt8], UInt16)? in
            switch Int32(p.pointee.ss_family) {
            case AF_INET:
                return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { a in
                    var v = a.pointee.sin_addr
                    return (AF_INET, withUnsafeBytes(of: &v) { Array($0) }, UInt16(bigEndian: a.pointee.sin_port))
                }
            case AF_INET6:
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { a in
                    var v = a.pointee.sin6_addr
                    return (AF_INET6, withUnsafeBytes(of: &v) { Array($0) }, UInt16(bigEndian: a.pointee.sin6_port))
                }
            default:
                return nil
            }
        }
    }
    /// The uid of the user named `name` in the user database (`getpwnam_r`), or `name` itself when
    /// it is a number; nil when there is no such user.
    public static func userID(named name: String) -> UInt32? {
        if let n = UInt32(name) { return n }
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>? = nil
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &found) == 0, found != nil else { return nil }
        return entry.pw_uid
    }
    /// `pidfd_open(pid, 0)`: a descriptor of process `pid`, or -1 (errno ESRCH: no such process).
    public static func pidfdOpen(_ pid: Int32) -> Int32 { clinux_pidfd_open(pid) }
    /// Heap bytes in use (glibc's `mallinfo2().uordblks`), for memory benchmarks.
    public static func heapBytesInUse() -> Int { Int(clinux_heap_in_use()) }
    /// `setxattr(2)` and friends (from <sys/xattr.h>, which Glibc's module does not include).
    public static func setxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeRawPointer?, _ size: Int, _ flags: Int32) -> Int32 {
        CLinux.setxattr(path, name, value, size, flags)
    }
    public static func getxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int {
        CLinux.getxattr(path, name, value, size)
    }
    public static func listxattr(_ path: UnsafePointer<CChar>, _ list: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int {
        CLinux.listxattr(path, list, size)
    }
    public static func removexattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>) -> Int32 {
        CLinux.removexattr(path, name)
    }
    /// `getxattrat(2)` (Linux 6.13) of `name` in `directory`, the last component not followed:
    /// an xattr of an item by its folder's descriptor (an O_PATH one too). -1 with errno ENOSYS on
    /// older kernels.
    public static func getxattrat(_ directory: Int32, _ name: UnsafePointer<CChar>, _ attribute: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int {
        clinux_getxattrat(directory, name, CLINUX_AT_SYMLINK_NOFOLLOW, attribute, value, UInt32(clamping: size))
    }
    public static func fsetxattr(_ fd: Int32, _ name: UnsafePointer<CChar>, _ value: UnsafeRawPointer?, _ size: Int, _ flags: Int32) -> Int32 {
        CLinux.fsetxattr(fd, name, value, size, flags)
    }
    public static func fgetxattr(_ fd: Int32, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int {
        CLinux.fgetxattr(fd, name, value, size)
    }
    public static func flistxattr(_ fd: Int32, _ list: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int {
        CLinux.flistxattr(fd, list, size)
    }
    public static func fremovexattr(_ fd: Int32, _ name: UnsafePointer<CChar>) -> Int32 {
        CLinux.fremovexattr(fd, name)
    }

    /// An O_PATH, close-on-exec descriptor on what `fd` refers to (`open_tree(fd, "", AT_EMPTY_PATH)`):
    /// the same inode, reached without walking a path (-1 and errno on failure, ENOSYS before 5.2).
    public static func pathDescriptor(of fd: Int32) -> Int32 {
        clinux_path_descriptor(fd)
    }

    /// `fchmodat2(fd, "", mode, AT_EMPTY_PATH)` (Linux 6.6): the mode of what an O_PATH descriptor
    /// refers to, set without walking a path (0, or -1 and errno: ENOSYS before 6.6).
    public static func chmod(pathDescriptor fd: Int32, _ mode: mode_t) -> Int32 {
        clinux_fchmod_path_descriptor(fd, UInt32(mode))
    }

    /// A kernel file handle (`struct file_handle`): names an inode without holding it open. Its bytes
    /// tell a reused inode number apart (ext4, XFS, btrfs and tmpfs put the inode's generation in
    /// them), so two handles are equal only for the same inode.
    public struct KernelFileHandle: Sendable, Equatable {
        var bytes: [UInt8]
        var type: Int32
        /// A handle as the kernel reported it elsewhere (fanotify's info records carry the
        /// `struct file_handle`'s type and bytes).
        public init(bytes: [UInt8], type: Int32) { self.bytes = bytes; self.type = type }
    }

    /// `name_to_handle_at(fd, "", AT_EMPTY_PATH)`: the handle and the mount id of what `fd` refers to.
    public static func fileHandle(of fd: Int32) -> (handle: KernelFileHandle, mountID: Int32)? {
        fileHandle(in: fd, name: "", flags: CLINUX_AT_EMPTY_PATH)
    }

    /// `name_to_handle_at(directory, name, 0)`: the handle of `name` in `directory` (a final symlink
    /// not followed).
    public static func fileHandle(in directory: Int32, name: UnsafePointer<CChar>) -> KernelFileHandle? {
        fileHandle(in: directory, name: name, flags: 0)?.handle
    }

    private static func fileHandle(in directory: Int32, name: UnsafePointer<CChar>, flags: Int32) -> (handle: KernelFileHandle, mountID: Int32)? {
        var h = clinux_file_handle()
        var mountID: Int32 = 0
        guard clinux_name_to_handle_at(directory, name, &h, &mountID, flags) == 0 else { return nil }
        let bytes = withUnsafeBytes(of: &h.f_handle) { Array($0.prefix(Int(h.handle_bytes))) }
        return (KernelFileHandle(bytes: bytes, type: h.handle_type), mountID)
    }

    /// The handle fanotify reports for what `fd` refers to (`AT_HANDLE_FID`): also on file systems
    /// whose handles cannot be opened again, such as overlayfs. Before Linux 6.5 (EINVAL), the
    /// ordinary handle.
    public static func identityHandle(of fd: Int32) -> KernelFileHandle? {
        var h = clinux_file_handle()
        var mountID: Int32 = 0
        var rc = clinux_name_to_handle_at(fd, "", &h, &mountID, CLINUX_AT_EMPTY_PATH | CLINUX_AT_HANDLE_FID)
        if rc != 0 && errno == EINVAL { rc = clinux_name_to_handle_at(fd, "", &h, &mountID, CLINUX_AT_EMPTY_PATH) }
        guard rc == 0 else { return nil }
        let bytes = withUnsafeBytes(of: &h.f_handle) { Array($0.prefix(Int(h.handle_bytes))) }
        return KernelFileHandle(bytes: bytes, type: h.handle_type)
    }

    /// `open_by_handle_at(2)` (needs CAP_DAC_READ_SEARCH); -1 and errno on failure.
    ///
    /// ENOMEM is asked again a few times: ext4 says ENOMEM, not ESTALE, for a handle whose file is
    /// gone while its inode number is being given to a new file at that very moment (its
    /// `iget_locked` finds the new inode still being created and gives up with "no memory"); a
    /// moment later the same handle gives ESTALE, the answer for a file that is gone. A real
    /// shortage of memory still fails with ENOMEM.
    public static func open(_ handle: KernelFileHandle, mountFD: Int32, flags: Int32) -> Int32 {
        var h = clinux_file_handle()
        h.handle_bytes = UInt32(handle.bytes.count)
        h.handle_type = handle.type
        withUnsafeMutableBytes(of: &h.f_handle) { dst in
            handle.bytes.withUnsafeBytes { src in dst.copyMemory(from: src) }
        }
        var fd = clinux_open_by_handle_at(mountFD, &h, flags)
        var again = 0
        while fd < 0 && errno == ENOMEM && again < 16 {
            sched_yield()
            again += 1
            fd = clinux_open_by_handle_at(mountFD, &h, flags)
        }
        return fd
    }

    /// fanotify(7) with directory file handles and names (`FAN_REPORT_DFID_NAME`).
    public enum Fanotify {
        public static let modify: UInt64 = CLINUX_FAN_MODIFY
        public static let attrib: UInt64 = CLINUX_FAN_ATTRIB
        public static let closeWrite: UInt64 = CLINUX_FAN_CLOSE_WRITE
        public static let create: UInt64 = CLINUX_FAN_CREATE
        public static let delete: UInt64 = CLINUX_FAN_DELETE
        public static let rename: UInt64 = CLINUX_FAN_RENAME
        public static let onChild: UInt64 = CLINUX_FAN_EVENT_ON_CHILD
        public static let onDirectory: UInt64 = CLINUX_FAN_ONDIR
        public static let overflow: UInt64 = CLINUX_FAN_Q_OVERFLOW

        /// A notification group reporting directory handles and names, and the changed file's own
        /// handle (`FAN_REPORT_FID`, an info record of type `fidRecord`) where the kernel can: for
        /// a name's creation, removal or rename too, the named item's (`FAN_REPORT_TARGET_FID`,
        /// Linux 5.17+; `reportsTargets`), not its folder's. -1 and errno on failure.
        public static func initialize() -> (group: Int32, reportsTargets: Bool) {
            let flags = [
                (CLINUX_FAN_REPORT_DFID_NAME | CLINUX_FAN_REPORT_FID | CLINUX_FAN_REPORT_TARGET_FID, true),
                (CLINUX_FAN_REPORT_DFID_NAME | CLINUX_FAN_REPORT_FID, false),
                (CLINUX_FAN_REPORT_DFID_NAME, false),
            ]
            for (report, targets) in flags {
                let g = clinux_fanotify_init(CLINUX_FAN_CLASS_NOTIF | report, UInt32(O_RDONLY | O_CLOEXEC))
                if g >= 0 { return (g, targets) }
            }
            return (-1, false)
        }
        /// The info record type of the changed object's own handle (`FAN_EVENT_INFO_TYPE_FID`).
        public static let fidRecord: UInt8 = 1
        /// Adds (or removes) a mark on the directory `fd` refers to (an O_PATH descriptor works as the
        /// base of "."; with no path fanotify wants a readable descriptor).
        public static func mark(_ group: Int32, add: Bool, mask: UInt64, directory fd: Int32) -> Int32 {
            clinux_fanotify_mark(group, add ? CLINUX_FAN_MARK_ADD : CLINUX_FAN_MARK_REMOVE, mask, fd, ".")
        }
    }

    /// `renameat2(2)`.
    public static func renameat2(_ olddirfd: Int32, _ oldpath: UnsafePointer<CChar>, _ newdirfd: Int32, _ newpath: UnsafePointer<CChar>, _ flags: UInt32) -> Int32 {
        clinux_renameat2(olddirfd, oldpath, newdirfd, newpath, flags)
    }

    /// `copy_file_range(2)`; offsets are updated in place.
    public static func copyFileRange(_ fdIn: Int32, _ offIn: inout Int, _ fdOut: Int32, _ offOut: inout Int, _ length: Int, _ flags: UInt32) -> Int {
        var i = Int64(offIn), o = Int64(offOut)
        let n = withUnsafeMutablePointer(to: &i) { ip in
            withUnsafeMutablePointer(to: &o) { op in
                clinux_copy_file_range(fdIn, UnsafeMutableRawPointer(ip).assumingMemoryBound(to: CLongLong.self), fdOut,
                                      UnsafeMutableRawPointer(op).assumingMemoryBound(to: CLongLong.self), length, flags)
            }
        }
        offIn = Int(i); offOut = Int(o)
        return n
    }
}

/// CRC-32 (IEEE 802.3, reflected) folded by the CPU's carry-less multiplication (PCLMULQDQ), for
/// the event log's frames: the same checksum as a table-driven one.
public enum CarrylessCRC32 {
    /// Whether this CPU has PCLMULQDQ (and SSE 4.1); `fold16` is only called then.
    public static let available: Bool = clinux_has_pclmul() != 0

    /// Goes on from `crc` (the running value, inverted: 0xFFFFFFFF at the start) over the first
    /// `count & ~15` bytes at `bytes` (`count` at least 16), and returns the running value there.
    public static func fold16(_ bytes: UnsafeRawPointer, count: Int, crc: UInt32) -> UInt32 {
        precondition(count >= 16)
        return clinux_crc32_fold16(bytes.assumingMemoryBound(to: UInt8.self), count, crc)
    }
}
