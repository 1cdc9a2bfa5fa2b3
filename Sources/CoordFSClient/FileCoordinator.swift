@_exported import ControlProtocol
@_exported import NameBytes
@_exported import Vocabulary
import Synchronization
import FoundationEssentials

/// Coordinated reads and writes of items in coordfs mounts, from any process, with the names
/// Apple users know (`NSFileCoordinator`), async/await instead of blocks, and absolute paths.
///
/// Names are bytes: a path `String` here holds a name that is not UTF-8 losslessly
/// (`LosslessName`: `String(nameBytes:)` makes one, `.nameBytes` and `withNameCString` give the
/// bytes back for I/O); paths handed to presenters and accessors are such strings too. The
/// `...AtPath:` variants take and give the bytes directly.
///
/// Each call asks the mount's daemon for the access (presenters in every process are asked
/// first), runs the accessor once it is granted, then releases it, telling the daemon what a
/// writer did (changed, moved with `item(at:didMoveTo:)`, or deleted) so presenters hear about it.
///
/// ```swift
/// let coordinator = FileCoordinator(filePresenter: document)
/// try await coordinator.coordinate(writingItemAt: "/mnt/docs/report.txt", options: .forMerging) { path in
///     try save(to: path)
/// }
/// ```
public final class FileCoordinator: Sendable {
    public typealias ReadingOptions = Vocabulary.ReadingOptions
    public typealias WritingOptions = Vocabulary.WritingOptions

    /// The presenter on whose behalf accesses are made (it is neither asked nor told about them).
    public let filePresenter: (any FilePresenter)?
    /// How mounts and their sockets are found.
    public let locator: ControlSocketLocator
    /// The longest to wait for a grant (nil: the daemon's limit).
    public let timeout: Duration?

    public init(filePresenter: (any FilePresenter)? = nil, locator: ControlSocketLocator = ControlSocketLocator(), timeout: Duration? = nil) {
        self.filePresenter = filePresenter
        self.locator = locator
        self.timeout = timeout
        purpose = Mutex("fc-\(Self.purposeCounter.add(1, ordering: .relaxed).newValue)")
    }

    private let purpose: Mutex<String>
    private static let purposeCounter = Atomic<UInt64>(0)

    /// Identifies this coordinator's accesses (Foundation's `purposeIdentifier`): accesses of one
    /// process with the same purpose never block each other, so an accessor can nest coordinated
    /// calls on the same coordinator; two coordinators of one process with different purposes
    /// exclude each other like two processes. Unique by default; set it (at most 256 bytes) to
    /// share. The process's own reads and writes through the mount (inside an accessor) never wait
    /// for its coordinators' accesses.
    public var purposeIdentifier: String {
        get { purpose.withLock { $0 } }
        set { purpose.withLock { $0 = newValue } }
    }

    // MARK: Coordinated access

    /// One item of a batch (Foundation's `NSFileAccessIntent`): a read or a write of a path.
    public struct AccessIntent: Sendable, Hashable {
        public enum Kind: Sendable, Hashable {
            case reading(ReadingOptions)
            case writing(WritingOptions)
        }
        /// The item's absolute path (inside a coordfs mount).
        public var path: String
        public var kind: Kind
        /// The item as a file URL.
        public var url: URL { URL(fileURLWithPath: path) }

        public static func readingIntent(with path: String, options: ReadingOptions = []) -> AccessIntent {
            AccessIntent(path: path, kind: .reading(options))
        }
        public static func writingIntent(with path: String, options: WritingOptions = []) -> AccessIntent {
            AccessIntent(path: path, kind: .writing(options))
        }
        public static func readingIntent(with url: URL, options: ReadingOptions = []) -> AccessIntent {
            readingIntent(with: url.path, options: options)
        }
        public static func writingIntent(with url: URL, options: WritingOptions = []) -> AccessIntent {
            writingIntent(with: url.path, options: options)
        }

        func wire(_ relative: MountPath) -> Intent {
            switch kind {
            case .reading(let options): return .reading(relative, options: options)
            case .writing(let options): return .writing(relative, options: options)
            }
        }
    }

    /// A coordinated read of `path`; the accessor gets the path. Callable from any actor (the
    /// accessor runs on the caller's, `isolation`).
    public func coordinate<T>(readingItemAt path: String, options: ReadingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (String) async throws -> T) async throws -> T {
        try await perform([.readingIntent(with: path, options: options)]) { try await accessor($0[0]) }
    }

    /// A coordinated write of `path`. Afterwards presenters hear that it changed, moved (if the
    /// accessor called `item(at:didMoveTo:)`) or was deleted (if it no longer exists).
    public func coordinate<T>(writingItemAt path: String, options: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (String) async throws -> T) async throws -> T {
        try await perform([.writingIntent(with: path, options: options)]) { try await accessor($0[0]) }
    }

    /// A coordinated read of the item whose path is `path`, given as bytes: a Linux name need not
    /// be UTF-8. The accessor gets the same bytes, to do its I/O with. (Every `String` path of this
    /// API may also hold such a name losslessly: `String(nameBytes:)`, `.nameBytes`,
    /// `withNameCString`, from `NameBytes`, re-exported here.)
    public func coordinate<T>(readingItemAtPath path: [UInt8], options: ReadingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: ([UInt8]) async throws -> T) async throws -> T {
        try await perform([.readingIntent(with: String(nameBytes: path), options: options)]) { try await accessor($0[0].nameBytes) }
    }

    /// A coordinated write of the item whose path is `path`, given as bytes (see the read).
    public func coordinate<T>(writingItemAtPath path: [UInt8], options: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: ([UInt8]) async throws -> T) async throws -> T {
        try await perform([.writingIntent(with: String(nameBytes: path), options: options)]) { try await accessor($0[0].nameBytes) }
    }

    /// A coordinated read of one item and write of another, granted together.
    public func coordinate<T>(readingItemAt readingPath: String, options readingOptions: ReadingOptions = [],
                              writingItemAt writingPath: String, options writingOptions: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (String, String) async throws -> T) async throws -> T {
        try await perform([.readingIntent(with: readingPath, options: readingOptions),
                           .writingIntent(with: writingPath, options: writingOptions)]) { try await accessor($0[0], $0[1]) }
    }

    /// Coordinated writes of two items, granted together (a move: source `forMoving`,
    /// destination `forReplacing`, and `item(at:didMoveTo:)` inside the accessor).
    public func coordinate<T>(writingItemAt path1: String, options options1: WritingOptions = [],
                              writingItemAt path2: String, options options2: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (String, String) async throws -> T) async throws -> T {
        try await perform([.writingIntent(with: path1, options: options1),
                           .writingIntent(with: path2, options: options2)]) { try await accessor($0[0], $0[1]) }
    }

    /// Any number of reads and writes (1 to 64, in one mount), granted together (Foundation's
    /// `coordinate(with:queue:byAccessor:)`); the accessor gets their paths in order.
    public func coordinate<T>(with intents: [AccessIntent],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: ([String]) async throws -> T) async throws -> T {
        try await perform(intents) { try await accessor($0) }
    }

    /// Foundation's `prepare(forReadingItemsAt:options:writingItemsAt:options:byAccessor:)`: one
    /// access to every item, granted together (presenters asked once), inside which the accessor
    /// makes its own coordinated calls on this coordinator: they share its purpose, so they are
    /// never held up by the batch.
    public func prepare<T>(forReadingItemsAt readingPaths: [String], options readingOptions: ReadingOptions = [],
                           writingItemsAt writingPaths: [String], options writingOptions: WritingOptions = [],
                           isolation: isolated (any Actor)? = #isolation,
                           byAccessor accessor: () async throws -> T) async throws -> T {
        let intents = readingPaths.map { AccessIntent.readingIntent(with: $0, options: readingOptions) }
            + writingPaths.map { AccessIntent.writingIntent(with: $0, options: writingOptions) }
        return try await perform(intents) { _ in try await accessor() }
    }

    // URL overloads (file URLs of items inside a coordfs mount).

    public func coordinate<T>(readingItemAt url: URL, options: ReadingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (URL) async throws -> T) async throws -> T {
        try await perform([.readingIntent(with: url, options: options)]) { try await accessor(URL(fileURLWithPath: $0[0])) }
    }

    public func coordinate<T>(writingItemAt url: URL, options: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (URL) async throws -> T) async throws -> T {
        try await perform([.writingIntent(with: url, options: options)]) { try await accessor(URL(fileURLWithPath: $0[0])) }
    }

    public func coordinate<T>(readingItemAt readingURL: URL, options readingOptions: ReadingOptions = [],
                              writingItemAt writingURL: URL, options writingOptions: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (URL, URL) async throws -> T) async throws -> T {
        try await perform([.readingIntent(with: readingURL, options: readingOptions), .writingIntent(with: writingURL, options: writingOptions)]) {
            try await accessor(URL(fileURLWithPath: $0[0]), URL(fileURLWithPath: $0[1]))
        }
    }

    public func coordinate<T>(writingItemAt url1: URL, options options1: WritingOptions = [],
                              writingItemAt url2: URL, options options2: WritingOptions = [],
                              isolation: isolated (any Actor)? = #isolation,
                              byAccessor accessor: (URL, URL) async throws -> T) async throws -> T {
        try await perform([.writingIntent(with: url1, options: options1), .writingIntent(with: url2, options: options2)]) {
            try await accessor(URL(fileURLWithPath: $0[0]), URL(fileURLWithPath: $0[1]))
        }
    }

    public func prepare<T>(forReadingItemsAt readingURLs: [URL], options readingOptions: ReadingOptions = [],
                           writingItemsAt writingURLs: [URL], options writingOptions: WritingOptions = [],
                           isolation: isolated (any Actor)? = #isolation,
                           byAccessor accessor: () async throws -> T) async throws -> T {
        try await prepare(forReadingItemsAt: readingURLs.map(\.path), options: readingOptions,
                          writingItemsAt: writingURLs.map(\.path), options: writingOptions, byAccessor: accessor)
    }

    public func item(at oldURL: URL, willMoveTo newURL: URL) { item(at: oldURL.path, willMoveTo: newURL.path) }
    public func item(at oldURL: URL, didMoveTo newURL: URL) { item(at: oldURL.path, didMoveTo: newURL.path) }

    // MARK: Moves and cancellation

    /// Announces, inside a write accessor, that it moved `oldPath` to `newPath`. The daemon hears
    /// it at once: presenters of the item (and of items inside it) follow it now, and are told
    /// `presentedItemDidMove(to:)` after the access (a move out of the mount is a deletion).
    public func item(at oldPath: String, didMoveTo newPath: String) {
        FileCoordinator.currentAccess?.announce(oldPath, newPath, done: true)
    }

    /// Announces, inside a write accessor, that it is about to move `oldPath` to `newPath` (the
    /// daemon records it in the event log).
    public func item(at oldPath: String, willMoveTo newPath: String) {
        FileCoordinator.currentAccess?.announce(oldPath, newPath, done: false)
    }

    /// Ends this coordinator's waits at once (Foundation's `cancel()`): each pending
    /// `coordinate` throws `CancellationError` and runs no accessor; the daemon forgets the
    /// request. An accessor already running is not interrupted. Cancelling the task that waits
    /// does the same for that wait.
    public func cancel() {
        let waits = waiting.withLock { Array($0.values) }
        for wait in waits { wait.cancel() }
    }

    private let waiting = Mutex<[UInt64: Task<SessionAccess, any Error>]>([:])
    private static let waitCounter = Atomic<UInt64>(0)

    /// The access whose accessor runs in this task.
    @TaskLocal private static var currentAccess: RunningAccess?

    /// The access an accessor runs in, and the moves it announced.
    private final class RunningAccess: Sendable {
        let mount: CoordFSMount
        let access: SessionAccess
        private let moves = Mutex<[(String, String, posted: Bool)]>([])
        init(mount: CoordFSMount, access: SessionAccess) {
            self.mount = mount
            self.access = access
        }

        func announce(_ from: String, _ to: String, done: Bool) {
            let source = try? CoordFSMount.containing(from), destination = try? CoordFSMount.containing(to)
            var posted = false
            if let (m1, p1) = source, let (m2, p2) = destination, m1 === mount, m2 === mount {
                mount.session.announceMove(access, from: p1, to: p2, done: done)
                posted = true
            }
            if done { moves.withLock { $0.append((from, to, posted)) } }
        }

        var all: [(String, String, posted: Bool)] { moves.withLock { $0 } }
    }

    private func perform<T>(_ items: [AccessIntent], isolation: isolated (any Actor)? = #isolation,
                            accessor: ([String]) async throws -> T) async throws -> T {
        var mount: CoordFSMount?
        var intents: [Intent] = []
        for item in items {
            let (itemMount, relative) = try CoordFSMount.containing(item.path, locator: locator)
            if let mount, mount !== itemMount {
                throw CoordFSClientError.notInMount(item.path, reason: "items in different mounts cannot be coordinated together")
            }
            mount = itemMount
            intents.append(item.wire(relative))
        }
        guard let mount else { throw CoordFSClientError.notInMount("", reason: "no items to coordinate") }
        let access = try await acquire(intents, on: mount)
        let paths = intents.map { mount.absolutePath($0.path) }
        // forUploading: the accessor reads a snapshot copy, made inside the access; when every
        // intent is such a read the access ends before the accessor runs, so others may write.
        let uploads = items.map { if case .reading(let o) = $0.kind { o.contains(.forUploading) } else { false } }
        var snapshot: (folder: String, paths: [String])?
        if uploads.contains(true) {
            do {
                snapshot = try Self.snapshot(paths, where: uploads)
            } catch {
                try? await mount.session.release(access)
                throw error
            }
            if !uploads.contains(false) { try? await mount.session.release(access) }
        }
        defer { if let snapshot { LocalFileSystem.removeTree(snapshot.folder) } }
        let running = RunningAccess(mount: mount, access: access)
        let result: Result<T, any Error>
        do {
            result = .success(try await FileCoordinator.$currentAccess.withValue(running) { try await accessor(snapshot?.paths ?? paths) })
        } catch {
            result = .failure(error)
        }
        if uploads.contains(false) {
            let changes = Self.changes(intents, paths: paths, moves: running.all, mount: mount)
            // A release that fails because the connection broke needs nothing: the daemon dropped
            // the access with the connection.
            try? await mount.session.release(access, changes: changes)
        }
        return try result.get()
    }

    /// Copies the items marked in `which` into a new private folder; returns it and the paths to
    /// give the accessor (the copies, and the others unchanged).
    private static func snapshot(_ paths: [String], where which: [Bool]) throws(CoordFSClientError) -> (folder: String, paths: [String]) {
        let folder = try LocalFileSystem.makeSnapshotFolder()
        var result: [String] = []
        do throws(CoordFSClientError) {
            for (index, (path, copy)) in zip(paths, which).enumerated() {
                guard copy else { result.append(path); continue }
                let name = path.split(separator: "/").last.map(String.init) ?? "item"
                try? LocalFileSystem.makeFolder(folder + "/\(index)")
                let destination = folder + "/\(index)/" + name
                try LocalFileSystem.copyItem(path, to: destination)
                result.append(destination)
            }
        } catch {
            LocalFileSystem.removeTree(folder)
            throw error
        }
        return (folder, result)
    }

    /// Waits for the grant; `cancel()` and task cancellation end the wait at once.
    private func acquire(_ intents: [Intent], on mount: CoordFSMount) async throws -> SessionAccess {
        let presenter = filePresenter.flatMap { FileCoordinator.registration(of: $0) }?.1
        let timeoutMs = timeout.map { duration -> UInt32 in
            let (seconds, attoseconds) = duration.components
            return UInt32(clamping: max(0, seconds) * 1000 + attoseconds / 1_000_000_000_000_000)
        }
        let purpose = purposeIdentifier
        let session = mount.session
        let key = Self.waitCounter.add(1, ordering: .relaxed).newValue
        let wait = Task { try await session.coordinate(intents, presenter: presenter, timeoutMs: timeoutMs, purpose: purpose) }
        waiting.withLock { $0[key] = wait }
        defer { waiting.withLock { _ = $0.removeValue(forKey: key) } }
        let outcome = await withTaskCancellationHandler {
            await wait.result
        } onCancel: {
            wait.cancel()
        }
        switch outcome {
        case .success(let access):
            if wait.isCancelled || Task.isCancelled {
                // Granted in the same instant it was cancelled: give it back, run no accessor.
                try? await session.release(access)
                throw CancellationError()
            }
            return access
        case .failure(let error):
            if let error = error as? ControlTransportError {
                if case .protocolError(let p) = error, p.code == .cancelled { throw CancellationError() }
                throw CoordFSClientError(error)
            }
            throw error
        }
    }

    /// What each write did, as far as the client can tell.
    private static func changes(_ intents: [Intent], paths: [String], moves: [(String, String, posted: Bool)], mount: CoordFSMount) -> [ItemChange] {
        var changes: [ItemChange] = []
        for (intent, path) in zip(intents, paths) where intent.isWriting {
            if let move = moves.last(where: { $0.0 == path || $0.1 == path }) {
                // A move told to the daemon already needs nothing more; one out of the mount is a deletion.
                if !move.posted && move.0 == path { changes.append(.deleted(intent.path)) }
            } else if LocalFileSystem.exists(path) {
                changes.append(.changed(intent.path))
            } else {
                changes.append(.deleted(intent.path))
            }
        }
        return changes
    }

    // MARK: Presenters (Apple's class methods)

    private static let presenters = Mutex<[ObjectIdentifier: (any FilePresenter, CoordFSMount, SessionPresenter)]>([:])

    static func registration(of presenter: any FilePresenter) -> (CoordFSMount, SessionPresenter)? {
        presenters.withLock { $0[ObjectIdentifier(presenter)].map { ($0.1, $0.2) } }
    }

    /// Registers `presenter` with the daemon of the mount holding its `presentedItemPath`. It
    /// stays registered (across daemon restarts) until `removeFilePresenter(_:)`.
    /// `hasUnsavedChanges`: the presenter already has unsaved changes in its document (see
    /// `FilePresenter.setHasUnsavedChanges(_:)`), said with the registration itself.
    public static func addFilePresenter(_ presenter: any FilePresenter, hasUnsavedChanges: Bool = false,
                                        locator: ControlSocketLocator = ControlSocketLocator()) async throws(CoordFSClientError) {
        guard let path = presenter.presentedItemPath else { throw .noPresentedItem }
        if registration(of: presenter) != nil { return }
        let (mount, relative) = try CoordFSMount.containing(path, locator: locator)
        let adapter = PresenterAdapter(presenter: presenter, mount: mount)
        let handle: SessionPresenter
        do {
            handle = try await mount.session.register(relative, kind: presenter.presentedItemKind, asks: presenter.presentedItemAsks,
                                                      unsaved: hasUnsavedChanges, endpoint: adapter)
        } catch {
            throw CoordFSClientError(error)
        }
        presenters.withLock { $0[ObjectIdentifier(presenter)] = (presenter, mount, handle) }
    }

    /// Unregisters `presenter`.
    public static func removeFilePresenter(_ presenter: any FilePresenter) async {
        guard let (_, mount, handle) = presenters.withLock({ $0.removeValue(forKey: ObjectIdentifier(presenter)) }) else { return }
        await mount.session.unregister(handle)
    }

    /// The presenters registered from this process.
    public static var filePresenters: [any FilePresenter] {
        presenters.withLock { $0.values.map(\.0) }
    }
}
