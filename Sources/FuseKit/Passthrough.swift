import CFuse3
import CURing
import Glibc
import SystemPackage
import Synchronization
import Linux

// Kernel passthrough (Linux 6.9+): the kernel reads and writes an open regular file straight from a
// backing file the daemon registered, and the daemon still answers open, release and everything else.
// libfuse 3.14 predates it, so the session adds it through libfuse's custom I/O hooks on /dev/fuse:
//   - the INIT reply gets FUSE_PASSTHROUGH (when the kernel offered it) and a stack depth;
//   - an open or create reply made with `OpenReply.backingID` gets FOPEN_PASSTHROUGH and the id.
// Everything else is written and spliced exactly as libfuse would; requests are read through the
// session's DeviceReader (one worker at a time, polling; DeviceReader.swift).

/// Registers backing files with the kernel for passthrough (`FuseSession` is one).
public protocol BackingFileRegistry: AnyObject, Sendable {
    /// The kernel accepted passthrough for this mount (asked for, offered, INIT answered).
    var passthroughEnabled: Bool { get }
    /// Why open files go through the daemon although passthrough was asked for. Nil when passthrough
    /// works, was not asked for, or INIT has not been answered yet.
    var passthroughUnavailable: PassthroughUnavailable? { get }
    /// Registers the file `fd` refers to (any descriptor of a regular file, O_PATH included); the id
    /// goes into open replies (`OpenReply.backingID`) until `closeBacking`.
    func openBacking(_ fd: Int32) -> Result<Int32, Errno>
    func closeBacking(_ id: Int32)
}

/// Why a mount that asked for passthrough serves open files through the daemon.
public enum PassthroughUnavailable: Sendable, Hashable, CustomStringConvertible {
    /// The kernel did not offer passthrough in INIT (older than 6.9, or built without it).
    case notOffered
    /// The kernel refused to register a backing file: EPERM (no CAP_SYS_ADMIN in the initial user
    /// namespace: none can be registered), ELOOP (the backing folder is on a stack of file systems
    /// deeper than the mount allows), or another error (the first one is kept).
    case registrationRefused(Errno)

    public var description: String {
        switch self {
        case .notOffered:
            "the kernel does not offer FUSE passthrough (it needs Linux 6.9 or later, built with CONFIG_FUSE_PASSTHROUGH)"
        case .registrationRefused(.notPermitted):
            "the kernel refused to register backing files (it needs CAP_SYS_ADMIN in the initial user namespace)"
        case .registrationRefused(.tooManySymbolicLinkLevels):
            "the kernel refused to register a backing file: the backing folder's file system is stacked too deep"
        case .registrationRefused(let e):
            "the kernel refused to register a backing file: \(e)"
        }
    }
}

/// The INIT handshake as the session's I/O hooks see it.
final class PassthroughHandshake: Sendable {
    /// How many stacked file systems may be below the mount's backing files (the backing folder on
    /// ext4 is 0; on overlayfs, 1). The mount itself is then one above.
    static let maxStackDepth: UInt32 = 2
    private static let initOpcode: UInt32 = 26

    let wanted: Bool
    /// INIT's unique id, once read (0 before); INIT is the first request on a new connection.
    private let initUnique = Atomic<UInt64>(0)
    private let answered = Atomic<Bool>(false)
    private let offered = Atomic<Bool>(false)
    /// The kernel offered FUSE_OVER_IO_URING (`RingTransport`).
    let ringOffered = Atomic<Bool>(false)
    /// The kernel offered FUSE_HANDLE_KILLPRIV_V2.
    private let killPrivilegesOffered = Atomic<Bool>(false)
    let enabled = Atomic<Bool>(false)
    /// The errno of the first failed backing-file registration (0: none failed).
    private let refused = Atomic<Int32>(0)

    /// Where the handshake says why passthrough is unavailable (the daemon's stderr: its log).
    private let say: @Sendable (String) -> Void

    init(wanted: Bool, say: @escaping @Sendable (String) -> Void = sayOnStandardError) {
        self.wanted = wanted
        self.say = say
    }

    /// INIT has not been answered yet.
    @inline(__always)
    var awaitingInit: Bool { !answered.load(ordering: .relaxed) }

    /// A request read from the device (`bytes` starts with fuse_in_header).
    @inline(__always)
    func read(_ bytes: UnsafeRawBufferPointer) {
        guard !answered.load(ordering: .relaxed), bytes.count >= 64,
              bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self) == Self.initOpcode else { return }
        // fuse_init_in after the 40-byte header: major, minor, max_readahead, flags, flags2.
        let flags = bytes.loadUnaligned(fromByteOffset: 52, as: UInt32.self)
        let flags2 = bytes.loadUnaligned(fromByteOffset: 56, as: UInt32.self)
        offered.store(flags & CFUSE_INIT_EXT != 0 && flags2 & CFUSE_PASSTHROUGH_FLAGS2 != 0, ordering: .relaxed)
        killPrivilegesOffered.store(flags & CFUSE_HANDLE_KILLPRIV_V2 != 0, ordering: .relaxed)
        ringOffered.store(flags & CFUSE_INIT_EXT != 0 && flags2 & CURING_FUSE_OVER_IO_URING_FLAGS2 != 0, ordering: .relaxed)
        initUnique.store(bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self), ordering: .releasing)
    }

    /// See `BackingFileRegistry.passthroughUnavailable`.
    var unavailable: PassthroughUnavailable? {
        guard wanted, answered.load(ordering: .acquiring) else { return nil }
        if !offered.load(ordering: .relaxed) { return .notOffered }
        let e = refused.load(ordering: .relaxed)
        return e == 0 ? nil : .registrationRefused(Errno(rawValue: e))
    }

    /// A backing-file registration failed with `error`; the first failure is kept (and said on stderr,
    /// the daemon's log). EPERM turns passthrough off for the mount: no registration can succeed.
    func registrationFailed(_ error: Errno) {
        if error == .notPermitted { enabled.store(false, ordering: .releasing) }
        guard refused.compareExchange(expected: 0, desired: error.rawValue, ordering: .acquiringAndReleasing).exchanged,
              let why = unavailable else { return }
        say("coordfs: open files that cannot be registered use the daemon instead of passthrough: \(why)")
    }

    /// Edits the INIT reply in `iov` (header, fuse_init_out) when it is one and passthrough is taken:
    /// FUSE_INIT_EXT, FUSE_PASSTHROUGH, a stack depth and, when the kernel offers it,
    /// FUSE_HANDLE_KILLPRIV_V2 (the Loopback serves it whether or not an open ends up passthrough).
    ///
    /// Without KILLPRIV_V2 the kernel asks the daemon for `security.capability` (a GETXATTR round
    /// trip) before every write, passthrough writes included, because FUSE inodes never get the VFS's
    /// "no privileges to drop" mark. With it the mark sticks after an inode's first write, and the
    /// file system clears set-user-ID and set-group-ID itself: the kernel sends an otherwise empty
    /// SETATTR where it would have changed the mode (`SetAttributes.dropsPrivileges`), a truncate
    /// carries `killSUID`, and an O_TRUNC open leaves it to the daemon (the Loopback does all three).
    ///
    /// With `ring` (the session's `RingTransport` is wanted and ready, and the kernel offered it), the
    /// reply also takes FUSE_OVER_IO_URING. Returns nil when `iov` is not the INIT reply; else what was
    /// answered: `ringPayload`, the payload buffer size the ring's entries need, when the ring was taken.
    @discardableResult
    func editInitReply(_ iov: UnsafeMutablePointer<iovec>, _ count: Int32, into copy: UnsafeMutableRawBufferPointer,
                       ring: Bool = false) -> InitAnswer? {
        guard !answered.load(ordering: .relaxed), count == 2, let header = iov[0].iov_base, iov[0].iov_len >= 16 else { return nil }
        let unique = initUnique.load(ordering: .acquiring)
        guard unique != 0, header.loadUnaligned(fromByteOffset: 8, as: UInt64.self) == unique else { return nil }
        answered.store(true, ordering: .releasing)
        if wanted, let why = unavailable { say("coordfs: passthrough=on, but open files use the daemon: \(why)") }
        let error = header.loadUnaligned(fromByteOffset: 4, as: Int32.self)
        let passthrough = wanted && offered.load(ordering: .relaxed)
        // fuse_init_out: flags at 12, max_write at 20, max_pages at 28, flags2 at 32, max_stack_depth at 36
        // (64 bytes since protocol 7.23).
        guard passthrough || ring, error == 0, let body = iov[1].iov_base, iov[1].iov_len == 64, copy.count >= 64 else {
            return InitAnswer(ringPayload: nil)
        }
        copy.copyMemory(from: UnsafeRawBufferPointer(start: body, count: 64))
        var flags = copy.loadUnaligned(fromByteOffset: 12, as: UInt32.self) | CFUSE_INIT_EXT
        var flags2 = copy.loadUnaligned(fromByteOffset: 32, as: UInt32.self)
        if passthrough {
            flags |= killPrivilegesOffered.load(ordering: .relaxed) ? CFUSE_HANDLE_KILLPRIV_V2 : 0
            flags2 |= CFUSE_PASSTHROUGH_FLAGS2
            copy.storeBytes(of: Self.maxStackDepth, toByteOffset: 36, as: UInt32.self)
        }
        var ringPayload: Int?
        if ring {
            flags2 |= CURING_FUSE_OVER_IO_URING_FLAGS2
            // The kernel's payload size: max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages), with
            // its default of 32 pages when the reply sets none.
            let maxWrite = Int(copy.loadUnaligned(fromByteOffset: 20, as: UInt32.self))
            let maxPages = max(32, Int(copy.loadUnaligned(fromByteOffset: 28, as: UInt16.self)))
            ringPayload = max(8192, maxWrite, maxPages * Int(sysconf(Int32(_SC_PAGESIZE))))
        }
        copy.storeBytes(of: flags, toByteOffset: 12, as: UInt32.self)
        copy.storeBytes(of: flags2, toByteOffset: 32, as: UInt32.self)
        iov[1].iov_base = copy.baseAddress
        if passthrough { enabled.store(true, ordering: .releasing) }
        return InitAnswer(ringPayload: ringPayload)
    }

    /// What the INIT reply said (`editInitReply`).
    struct InitAnswer {
        var ringPayload: Int?
    }
}

/// The backing id an open or create reply being sent on this thread carries (`Request.reply(open:)`
/// sets it around the libfuse call, the writev hook puts it into the reply).
private let pendingBackingKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()

func withPendingBackingID<R>(_ id: Int32?, _ body: () -> R) -> R {
    guard let id, id > 0 else { return body() }
    pthread_setspecific(pendingBackingKey, UnsafeRawPointer(bitPattern: Int(id)))
    defer { pthread_setspecific(pendingBackingKey, nil) }
    return body()
}

@inline(__always)
private func handshake(_ userdata: UnsafeMutableRawPointer?) -> PassthroughHandshake? {
    userdata.map { Unmanaged<SessionState>.fromOpaque($0).takeUnretainedValue().passthrough }
}

@inline(__always)
private func reader(_ userdata: UnsafeMutableRawPointer?) -> DeviceReader? {
    userdata.map { Unmanaged<SessionState>.fromOpaque($0).takeUnretainedValue().reader }
}

/// Writes a reply: into its ring entry when the ring holds the request (`RingTransport`), else to
/// /dev/fuse.
@inline(__always)
private func deliver(_ fd: Int32, _ iov: UnsafePointer<iovec>?, _ count: Int32, _ userdata: UnsafeMutableRawPointer?) -> Int {
    if let iov, count >= 1, iov[0].iov_len >= 16, let header = iov[0].iov_base, let userdata {
        let ring = Unmanaged<SessionState>.fromOpaque(userdata).takeUnretainedValue().ring
        if let entry = ring.entry(holding: header.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) {
            return ring.commit(entry, iov, count)
        }
    }
    return Glibc.writev(fd, iov, count)
}

/// libfuse's I/O hooks: plain system calls, plus the two edits above, with requests read through the
/// session's `DeviceReader` (DeviceReader.swift).
func passthroughIO() -> fuse_custom_io {
    var io = fuse_custom_io()
    io.read = { fd, buf, len, userdata in
        let n = reader(userdata)?.receive(fd, into: buf) { Glibc.read(fd, buf, len) } ?? Glibc.read(fd, buf, len)
        if n > 0, let buf {
            handshake(userdata)?.read(UnsafeRawBufferPointer(start: buf, count: n))
            TmpfileRequest.readAsCreate(buf, length: n)
        }
        return n
    }
    io.writev = { fd, iov, count, userdata in
        guard let iov, count == 2 else { return deliver(fd, iov, count, userdata) }
        if let raw = pthread_getspecific(pendingBackingKey) {
            // fuse_open_out ends the reply (after fuse_entry_out for create): fh, open_flags, backing_id.
            let body = iov[1]
            guard let base = body.iov_base, body.iov_len >= 16, body.iov_len <= 256 else { return deliver(fd, iov, count, userdata) }
            return withUnsafeTemporaryAllocation(byteCount: body.iov_len, alignment: 8) { copy in
                copy.copyMemory(from: UnsafeRawBufferPointer(start: base, count: body.iov_len))
                let at = body.iov_len - 16
                copy.storeBytes(of: copy.loadUnaligned(fromByteOffset: at + 8, as: UInt32.self) | CFUSE_FOPEN_PASSTHROUGH,
                                toByteOffset: at + 8, as: UInt32.self)
                copy.storeBytes(of: Int32(Int(bitPattern: raw)), toByteOffset: at + 12, as: Int32.self)
                var vec = (iov[0], iovec(iov_base: copy.baseAddress, iov_len: body.iov_len))
                return withUnsafeMutableBytes(of: &vec) { deliver(fd, $0.baseAddress!.assumingMemoryBound(to: iovec.self), 2, userdata) }
            }
        }
        guard let userdata, let shake = handshake(userdata), shake.awaitingInit else { return deliver(fd, iov, count, userdata) }
        let state = Unmanaged<SessionState>.fromOpaque(userdata).takeUnretainedValue()
        return withUnsafeTemporaryAllocation(byteCount: 64, alignment: 8) { copy in
            let answer = shake.editInitReply(iov, count, into: copy, ring: state.ringWillBeUsed)
            let n = Glibc.writev(fd, iov, count)
            if let answer { state.initAnswered(ringPayload: n > 0 ? answer.ringPayload : nil) }
            return n
        }
    }
    io.splice_receive = { fdin, offin, fdout, offout, len, flags, userdata in
        reader(userdata)?.receive(fdin, into: nil) { cfuse_splice(fdin, offin, fdout, offout, len, flags) }
            ?? cfuse_splice(fdin, offin, fdout, offout, len, flags)
    }
    io.splice_send = { fdin, offin, fdout, offout, len, flags, _ in
        cfuse_splice(fdin, offin, fdout, offout, len, flags)
    }
    return io
}
