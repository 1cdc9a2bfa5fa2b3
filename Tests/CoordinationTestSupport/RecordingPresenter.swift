// The journal and the recording presenter the coordination tests and the cluster tests share
// (a target of its own, so each is written once).
import Coordination
import Synchronization

/// Thread-safe log shared by presenters and accessors (and a cluster's nodes and hosts), to check
/// the order of messages.
public final class Journal: Sendable {
    private let entries = Mutex<[String]>([])

    public init() {}

    public func log(_ entry: String) { entries.withLock { $0.append(entry) } }
    public var all: [String] { entries.withLock { $0 } }
    public func index(_ entry: String) -> Int? { all.firstIndex(of: entry) }
    public func contains(_ entry: String) -> Bool { all.contains(entry) }

    /// Entries of one presenter (prefix "name:"), plus the accessor markers, without the prefix.
    public func view(_ name: String) -> [String] {
        all.compactMap { entry in
            if entry.hasPrefix(name + ":") { return String(entry.dropFirst(name.count + 1)) }
            if entry == "ACCESS" { return entry }
            return nil
        }
    }
}

public struct PresenterFailure: Error, Equatable {
    public let reason: String
    public init(reason: String) { self.reason = reason }
}

/// A presenter that logs every message to a journal as "name:message" and can be told to misbehave.
public final class RecordingPresenter: FilePresenter, @unchecked Sendable {
    public enum Behavior: Sendable {
        case answer
        case hangRelinquish
        case failSave
        /// Refuses its own deletion and a subitem's.
        case failDeletion
        /// Refuses its own deletion only.
        case refuseDeletion
        case slowRelinquish(Duration)
    }

    public let name: String
    public let journal: Journal
    public let behavior: Behavior
    private let pathBox: Mutex<ItemPath?>
    /// Runs inside `savePresentedItemChanges` (for example, a coordinated write on its own behalf).
    let onSave: (@Sendable () async throws -> Void)?

    public init(_ name: String, at path: ItemPath, journal: Journal, behavior: Behavior = .answer,
                onSave: (@Sendable () async throws -> Void)? = nil) {
        self.name = name
        self.journal = journal
        self.behavior = behavior
        self.pathBox = Mutex(path)
        self.onSave = onSave
    }

    public var presentedItemPath: ItemPath? { pathBox.withLock { $0 } }
    public var path: ItemPath? { presentedItemPath }

    private func reacquirer() -> Reacquirer {
        let (journal, name) = (self.journal, self.name)
        return { journal.log("\(name):reacquire") }
    }

    public func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        journal.log("\(name):relinquishToReader")
        await misbehave()
        return reacquirer()
    }

    public func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        journal.log("\(name):relinquishToWriter")
        await misbehave()
        return reacquirer()
    }

    private func misbehave() async {
        switch behavior {
        case .hangRelinquish: try? await Task.sleep(for: .seconds(3))
        case .slowRelinquish(let d): try? await Task.sleep(for: d)
        default: break
        }
    }

    public func savePresentedItemChanges() async throws {
        journal.log("\(name):save")
        if case .failSave = behavior { throw PresenterFailure(reason: "disk full") }
        try await onSave?()
    }

    public func accommodatePresentedItemDeletion() async throws {
        journal.log("\(name):accommodateDeletion")
        switch behavior {
        case .failDeletion, .refuseDeletion: throw PresenterFailure(reason: "busy")
        default: break
        }
    }

    public func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {
        journal.log("\(name):accommodateSubitemDeletion(\(path))")
        if case .failDeletion = behavior { throw PresenterFailure(reason: "busy") }
    }

    public func presentedItemDidChange() async { journal.log("\(name):didChange") }

    public func presentedItemDidMove(to newPath: ItemPath) async {
        pathBox.withLock { $0 = newPath }
        journal.log("\(name):didMove(\(newPath))")
    }

    public func presentedSubitemDidAppear(at path: ItemPath) async { journal.log("\(name):subitemDidAppear(\(path))") }
    public func presentedSubitemDidChange(at path: ItemPath) async { journal.log("\(name):subitemDidChange(\(path))") }
    public func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async {
        journal.log("\(name):subitemDidMove(\(oldPath)->\(newPath))")
    }
}
