@_exported import ControlProtocol
@_exported import NameBytes
import Synchronization

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
    public typealias ReadingOptions = ControlProtocol.ReadingOptions
    public typealias WritingOptions = ControlProtocol.WritingOptions

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

    /// A coordinated read of `path`; the accessor gets the path.
    public func coordinate<T>(readingItemAt path: String, options: ReadingOptions = [],
                              byAccessor accessor: (String) async throws -> T) async throws -> T {
        try await perform([(path, { .reading($0, options: options) })]) { try await accessor($0[0]) }
    }

    /// A coordinated write of `path`. Afterwards presenters hear that it changed, moved (if the
    /// accessor called `item(at:didMoveTo:)`) or was deleted (if it no longer exists).
    public func coordinate<T>(writingItemAt path: String, options: WritingOptions = [],
                              byAccessor accessor: (String) async throws -> T) async throws -> T {
        try await perform([(path, { .writing($0, options: options) })]) { try await accessor($0[0]) }
    }

    /// A coordinated read of the item whose path is `path`, given as bytes: a Linux name need not
    /// be UTF-8. The accessor gets the same bytes, to do its I/O with. (Every `String` path of this
    /// API may also hold such a name losslessly: `String(nameBytes:)`, `.nameBytes`,
    /// `withNameCString`, from `NameBytes`, re-exported here.)
    public func coordinate<T>(readingItemAtPath path: [UInt8], options: ReadingOptions = [],
                              byAccessor accessor: ([UInt8]) async throws -> T) async throws -> T {
        try await coordinate(readingItemAt: String(nameBytes: path), options: options) { try await accessor($0.nameBytes) }
    }

    /// A coordinated write of the item whose path is `path`, given as bytes (see the read).
    public func coordinate<T>(writingItemAtPath path: [UInt8], options: WritingOptions = [],
                              byAccessor accessor: ([UInt8]) async throws -> T) async throws -> T {
        try await coordinate(writingItemAt: String(nameBytes: path), options: options) { try await accessor($0.nameBytes) }
    }

    /// A coordinated read of one item and write of another, granted together.
    public func coordinate<T>(readingItemAt readingPath: String, options readingOptions: ReadingOptions = [],
                              writingItemAt writingPath: String, options writingOptions: WritingOptions = [],
                              byAccessor accessor: (String, String) async throws -> T) async throws -> T {
        try await perform([(readingPath, { .reading($0, options: readingOptions) }),
                           (writingPath, { .writing($0, options: writingOptions) })]) { try await accessor($0[0], $0[1]) }
    }

    /// Coordinated writes of two items, granted together (a move: source `forMoving`,
    /// destination `forReplacing`, and `item(at:didMoveTo:)` inside the accessor).
    public func coordinate<T>(writingItemAt path1: String, options options1: WritingOptions = [],
                              writingItemAt path2: String, options options2: WritingOptions = [],
                              byAccessor accessor: (String, String) async throws -> T) async throws -> T {
        try await perform([(path1, { .writing($0, options: options1) }),
                           (path2, { .writing($0, options: options2) })]) { try await accessor($0[0], $0[1]) }
    }

    /// Announces, inside a write accessor, that it moved `oldPath` to `newPath`; presenters of
    /// the item get `presentedItemDidMove(to:)` after the access.
    public func item(at oldPath: String, didMoveTo newPath: String) {
        FileCoordinator.currentMoves?.record(oldPath, newPath)
    }

    /// Announces a move before doing it (accepted for Foundation compatibility; the move is
    /// reported by `item(at:didMoveTo:)`).
    public func item(at oldPath: String, willMoveTo newPath: String) {}

    /// The moves announced inside the accessor running in this task.
    @TaskLocal private static var currentMoves: MoveLog?

    private final class MoveLog: Sendable {
        private let moves = Mutex<[(String, String)]>([])
        func record(_ from: String, _ to: String) { moves.withLock { $0.append((from, to)) } }
        var all: [(String, String)] { moves.withLock { $0 } }
    }

    private func perform<T>(_ items: [(String, (MountPath) -> Intent)], accessor: ([String]) async throws -> T) async throws -> T {
        var mount: CoordFSMount?
        var intents: [Intent] = []
        for (path, makeIntent) in items {
            let (itemMount, relative) = try CoordFSMount.containing(path, locator: locator)
            if let mount, mount !== itemMount {
                throw CoordFSClientError.notInMount(path, reason: "items in different mounts cannot be coordinated together")
            }
            mount = itemMount
            intents.append(makeIntent(relative))
        }
        guard let mount else { throw CoordFSClientError.notInMount("", reason: "no items to coordinate") }
        let presenter = filePresenter.flatMap { FileCoordinator.registration(of: $0) }
        let timeoutMs = timeout.map { duration -> UInt32 in
            let (seconds, attoseconds) = duration.components
            return UInt32(clamping: max(0, seconds) * 1000 + attoseconds / 1_000_000_000_000_000)
        }
        let access: SessionAccess
        do {
            access = try await mount.session.coordinate(intents, presenter: presenter?.1, timeoutMs: timeoutMs, purpose: purposeIdentifier)
        } catch {
            throw CoordFSClientError(error)
        }
        let paths = intents.map { mount.absolutePath($0.path) }
        let moves = MoveLog()
        let result: Result<T, any Error>
        do {
            result = .success(try await FileCoordinator.$currentMoves.withValue(moves) { try await accessor(paths) })
        } catch {
            result = .failure(error)
        }
        let changes = Self.changes(intents, paths: paths, moves: moves.all, mount: mount)
        // A release that fails because the connection broke needs nothing: the daemon dropped
        // the access with the connection.
        try? await mount.session.release(access, changes: changes)
        return try result.get()
    }

    /// What each write did, as far as the client can tell.
    private static func changes(_ intents: [Intent], paths: [String], moves: [(String, String)], mount: CoordFSMount) -> [ItemChange] {
        var changes: [ItemChange] = []
        for (intent, path) in zip(intents, paths) where intent.isWriting {
            if let move = moves.last(where: { $0.0 == path }) {
                if let (destinationMount, destination) = try? CoordFSMount.containing(move.1), destinationMount === mount {
                    changes.append(.moved(intent.path, to: destination))
                } else {
                    changes.append(.deleted(intent.path))  // moved out of the mount
                }
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
