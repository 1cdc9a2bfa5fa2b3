import CSQLiteShm
import NameBytes
import Foundation
import GRDB
import Glibc
import Synchronization

/// The document store: copy-on-write snapshots of presented documents, their presenters' bases,
/// the "underlying file changed" events and conflicts, and their resolution.
///
/// It works directly on the backing folder with plain paths relative to `backingRoot`; the mount
/// calls the `preserveBefore…` methods before it lets a mutation through, and
/// ``noteExternalChange(_:_:by:)`` after. The state directory (metadata database and kept files)
/// must live on the backing filesystem, so that `FICLONE` works, and the mount must hide it. A
/// kept version never shares an inode with a live file (no hard links): it is a clone or a copy.
///
/// Every public method is one SQLite transaction (WAL mode) that also performs the file operations
/// it needs; a thrown error leaves files and metadata as they were. Calls are serialised, so a long
/// full copy (ext4) holds up other store calls for its duration; clones take microseconds.
public final class DocumentStore: @unchecked Sendable {
    /// The path the store reaches the backing folder by: its canonical absolute path, or, when
    /// given through a descriptor its process holds (`/proc/self/fd/N`, the daemon's), that path
    /// as given, so that a backing folder renamed or moved while the store is open is still the
    /// one it reads and writes (and nothing lands in another folder put at its old path).
    public let backingRoot: String
    /// The canonical absolute path of the state directory.
    public let stateDirectory: String
    public let configuration: StoreConfiguration
    /// Whether the backing filesystem answered the FICLONE probe (XFS reflink=1, btrfs).
    public let cloneSupported: Bool
    /// The backing filesystem's name as `statfs` reports it ("ext4", "xfs", "btrfs", ... or hex).
    public let filesystemName: String

    /// How in-place writes and eager bases are kept on this backing filesystem.
    public var inPlaceMethod: SnapshotMethod { cloneSupported && configuration.allowReflink ? .reflink : .copy }

    let database: DatabasePool
    /// Versions live readers hold (``keepForReaders(_:reason:holders:)``): holder → path → versions.
    /// In memory only: the readers are processes of this daemon's mount.
    let readerHolds = Mutex<[String: [String: Set<VersionID>]]>([:])
    /// The user of each holder in `readerHolds` that has one (its holds count in its
    /// ``UserPinBudget``).
    let holderUsers = Mutex<[String: UInt32]>([:])
    /// What each user pins, as known in the write transaction under way (``mayPin``); emptied at
    /// the start of every write transaction (they run one at a time).
    let pinLedger = Mutex<[UInt32: PinUsage]>([:])
    let objectsDirectory: String
    let temporaryDirectory: String
    /// The state directory relative to the backing root, when inside it (paths there are refused).
    let stateRelativePath: String?
    /// Where the state directory was when the store opened, links resolved (for checks of paths;
    /// `stateDirectory` is what the store reads and writes through). A state directory given
    /// through a held descriptor is looked up again at each check (`whereNow()`).
    let realStateDirectory: String

    /// Opens (creating if needed) the store.
    ///
    /// - Parameters:
    ///   - backingRoot: the backing folder.
    ///   - stateDirectory: where the store keeps its database and files; conventionally
    ///     `<backingRoot>/.coordfs/store`. Created if missing.
    public init(backingRoot: String, stateDirectory: String, configuration: StoreConfiguration = StoreConfiguration()) throws {
        let realRoot = try FileSystem.realPath(backingRoot)
        self.backingRoot = Self.isHeld(backingRoot) ? backingRoot : realRoot
        try FileSystem.mkdirs(stateDirectory)
        let real = try FileSystem.realPath(stateDirectory)
        // A folder given through a descriptor its process holds (`/proc/self/fd/N/...`, the
        // daemon's `StateFolder.io`) is used as given, so that the store keeps reaching that folder
        // whatever is later put at its name; where it is now is kept for the checks of paths.
        self.stateDirectory = Self.isHeld(stateDirectory) ? stateDirectory : real
        realStateDirectory = real
        self.configuration = configuration
        objectsDirectory = self.stateDirectory + "/objects"
        temporaryDirectory = self.stateDirectory + "/tmp"
        try FileSystem.mkdirs(objectsDirectory)
        try FileSystem.mkdirs(temporaryDirectory)
        if real.utf8.starts(with: (realRoot + "/").utf8) {
            stateRelativePath = String(real.dropFirst(realRoot.count + 1))
        } else {
            stateRelativePath = nil
        }
        // Leftovers of an interrupted operation.
        for name in try FileSystem.list(temporaryDirectory) { FileSystem.unlinkIfPresent(temporaryDirectory + "/" + name) }
        (cloneSupported, filesystemName) = Self.probe(temporaryDirectory)

        var config = Configuration()
        config.foreignKeysEnabled = true
        // Another process on the same store (a second daemon, a CLI reading directly) waits
        // instead of failing with SQLITE_BUSY.
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in
            // WAL + NORMAL: a commit survives the daemon being killed (the WAL is in the OS); only
            // a power loss can drop the last transactions.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        // SQLite maps the WAL index (`metadata.sqlite-shm`) into memory, and on a file system whose
        // blocks are smaller than a memory page it leaves holes there: a store into one on a full
        // disk killed the daemon with SIGBUS. This process's connections allocate each region's
        // blocks first, and fail with "database or disk is full" when they cannot (csqliteshm.h).
        _ = csqliteshm_register_default()
        do {
            database = try DatabasePool(path: self.stateDirectory + "/metadata.sqlite", configuration: config)
            try Schema.migrator().migrate(database)
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
        try sweepOrphans()
    }

    /// FICLONE once between two scratch files; also names the filesystem.
    private static func probe(_ directory: String) -> (Bool, String) {
        var name = "unknown"
        if let type = FileSystem.filesystemType(directory) {
            switch type {
            case 0xEF53: name = "ext4"
            case 0x5846_5342: name = "xfs"
            case 0x9123_683E: name = "btrfs"
            case 0x0102_1994: name = "tmpfs"
            case 0x2FC1_2FC1: name = "zfs"
            case 0x794C_7630: name = "overlayfs"
            case let other: name = "0x" + String(other, radix: 16)
            }
        }
        let a = directory + "/probe-\(UInt64.random(in: 0...UInt64.max))"
        let b = a + "-clone"
        defer { FileSystem.unlinkIfPresent(a); FileSystem.unlinkIfPresent(b) }
        guard let fd = try? FileSystem.open(a, O_WRONLY | O_CREAT | O_EXCL, 0o600) else { return (false, name) }
        var byte: UInt8 = 0x2A
        _ = Glibc.write(fd, &byte, 1)
        FileSystem.close(fd)
        return ((try? FileSystem.reflink(from: a, to: b)) != nil, name)
    }

    /// Drops kept files nobody references and versions whose file vanished; gives hard-linked
    /// versions of older builds their own bytes.
    private func sweepOrphans() throws {
        do {
            try database.writeWithoutTransaction { db in
                // IMMEDIATE: no other process's snapshot is between creating its file and
                // committing its row while the files are listed.
                try db.inTransaction(.immediate) {
                    let names = Set(try FileSystem.list(objectsDirectory))
                    let known = try String.fetchSet(db, sql: "SELECT storedName FROM version")
                    for missing in known.subtracting(names) {
                        try db.execute(sql: "DELETE FROM version WHERE storedName = ?", arguments: [missing])
                    }
                    for orphan in names.subtracting(known) { FileSystem.unlinkIfPresent(objectsDirectory + "/" + orphan) }
                    try detachLinkVersions(db)
                    return .commit
                }
            }
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
    }

    // MARK: Transactions

    /// One write transaction; files to drop once it committed are unlinked afterwards.
    func write<T>(_ body: (Database) throws -> T) throws -> T {
        var dropped: [String] = []
        let result: T
        do {
            result = try database.write { db in
                pinLedger.withLock { $0.removeAll(keepingCapacity: true) }
                let changesBefore = db.totalChangesCount
                let value = try body(db)
                // Retention only needs another look when this transaction changed something.
                if db.totalChangesCount != changesBefore { dropped = try collectGarbage(db) }
                return value
            }
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
        for name in dropped { FileSystem.unlinkIfPresent(objectsDirectory + "/" + name) }
        return result
    }

    func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try database.read(body)
        } catch let error as DatabaseError {
            throw DocumentStoreError.database(error.description)
        }
    }

    // MARK: Paths

    /// Validates a path relative to the backing root; returns it normalised and absolute.
    func resolve(_ path: String) throws -> (relative: String, absolute: String) {
        if path.isEmpty { throw DocumentStoreError.invalidPath(path, reason: "empty") }
        if path.utf8.first == UInt8(ascii: "/") { throw DocumentStoreError.invalidPath(path, reason: "must be relative to the backing folder") }
        if path.utf8.contains(0) { throw DocumentStoreError.invalidPath(path, reason: "contains a NUL byte") }
        var components: [Substring] = []
        // Names are bytes (`LosslessName`): split at the byte '/', compare bytes.
        for component in path.utf8.split(separator: UInt8(ascii: "/")).map(Substring.init) where !component.utf8.elementsEqual(".".utf8) {
            if component.utf8.elementsEqual("..".utf8) { throw DocumentStoreError.invalidPath(path, reason: "contains '..'") }
            components.append(component)
        }
        if components.isEmpty { throw DocumentStoreError.invalidPath(path, reason: "names the backing folder itself") }
        let relative = components.joined(separator: "/")
        if let state = stateRelativePath, ExactName.same(relative, state) || relative.utf8.starts(with: (state + "/").utf8) {
            throw DocumentStoreError.invalidPath(path, reason: "inside the document store")
        }
        // The parent may reach through symbolic links; it must stay inside the backing folder.
        let parent = components.count > 1 ? backingRoot + "/" + components.dropLast().joined(separator: "/") : backingRoot
        // Where the backing folder is now, then the parent, then the folder again: a rename of the
        // backing folder in between is seen, and the parent looked up again.
        for _ in 0..<3 {
            let (root, state) = whereNow()
            // No such folder (yet): nothing there to reach through a link.
            guard let realParent = try? FileSystem.realPath(parent) else { return (relative, parent + "/" + components.last!) }
            guard ExactName.same(whereNow().root, root) else { continue }
            if !ExactName.same(realParent, root) && !realParent.utf8.starts(with: (root + "/").utf8) {
                throw DocumentStoreError.invalidPath(path, reason: "leads outside the backing folder")
            }
            if ExactName.same(realParent, state) || realParent.utf8.starts(with: (state + "/").utf8) {
                throw DocumentStoreError.invalidPath(path, reason: "inside the document store")
            }
            // Read and written through `backingRoot` (a held descriptor's path, where given).
            // (The same scalars: `root` ends where a name does.)
            let inside = String(decoding: realParent.utf8.dropFirst(root.utf8.count), as: UTF8.self)
            return (relative, backingRoot + inside + "/" + components.last!)
        }
        throw DocumentStoreError.system(operation: "resolve", path: path, errno: EAGAIN)
    }

    /// Whether a path goes through a descriptor this process holds (`/proc/self/fd/N`): the
    /// folder it names stays the same whatever is renamed or put at its former path.
    static func isHeld(_ path: String) -> Bool { path.utf8.starts(with: "/proc/self/fd/".utf8) }

    /// Where the backing folder and the state directory are now, links resolved: for a folder
    /// given through a held descriptor, looked up again (it may have been renamed or moved since
    /// the store opened); for another, where it was then.
    func whereNow() -> (root: String, state: String) {
        let root = Self.isHeld(backingRoot) ? (try? FileSystem.realPath(backingRoot)) ?? backingRoot : backingRoot
        let state = Self.isHeld(stateDirectory) ? (try? FileSystem.realPath(stateDirectory)) ?? realStateDirectory : realStateDirectory
        return (root, state)
    }

    /// The folder of the document at `relative` (as `resolve` gives it), opened by walking its
    /// folders' names from the backing folder without following a symbolic link, and the
    /// document's name in it. What the store writes into a document's folder (a resolution, a
    /// restore, a conflict copy) and the bytes it reads of a document for a peer go through it: a
    /// user who may write a folder on the path cannot swap in a link (to a folder that user may
    /// not write or read) between the peer's permission check and the store's use. A link on the
    /// way is refused (`invalidPath`): the daemon's paths have none (the mount's are the kernel's,
    /// the control socket's are resolved first).
    func openFolder(of relative: String) throws -> (fd: Int32, name: String) {
        var names = relative.utf8.split(separator: UInt8(ascii: "/")).map { String(Substring($0)) }
        guard let name = names.popLast() else { throw DocumentStoreError.invalidPath(relative, reason: "names the backing folder itself") }
        var fd = try FileSystem.open(backingRoot, O_RDONLY | O_DIRECTORY)
        for folder in names {
            let next = folder.withNameCString { openat(fd, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            let code = errno
            FileSystem.close(fd)
            guard next >= 0 else {
                if code == ELOOP || code == ENOTDIR { throw DocumentStoreError.invalidPath(relative, reason: "a folder on the path is a symbolic link or no folder") }
                throw DocumentStoreError.system(operation: "open", path: relative, errno: code)
            }
            fd = next
        }
        return (fd, name)
    }

    /// `lstat` of a document path: nil when missing, an error when not a regular file.
    func statDocument(_ absolute: String, _ relative: String) throws -> stat? {
        guard let st = try FileSystem.lstatIfPresent(absolute) else { return nil }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw DocumentStoreError.notARegularFile(relative) }
        return st
    }

    /// The document's file at `absolute` as it is now: nil when none is there, missing or replaced
    /// by something that is not a regular file (a folder made at its name, a symbolic link renamed
    /// over it, a FIFO), which is no version of the document and is never followed: for the
    /// document, it was deleted.
    func documentFileIfPresent(_ absolute: String) throws -> stat? {
        guard let st = try FileSystem.lstatIfPresent(absolute), (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return st
    }

    func storedPath(_ name: String) -> String { objectsDirectory + "/" + name }

    func temporaryPath(_ tag: String) -> String {
        temporaryDirectory + "/\(tag)-\(UInt64.random(in: 0...UInt64.max))"
    }

    static func now() -> Double { Date().timeIntervalSince1970 }

    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
