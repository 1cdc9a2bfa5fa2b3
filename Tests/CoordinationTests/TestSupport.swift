import Coordination
import Synchronization

/// Thread-safe log shared by presenters and accessors, to check the order of messages.
final class Journal: Sendable {
    private let entries = Mutex<[String]>([])

    func log(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }

    /// Entries of one presenter (prefix "name:"), plus the accessor markers, without the prefix.
    func view(_ name: String) -> [String] {
        all.compactMap { entry in
            if entry.hasPrefix(name + ":") { return String(entry.dropFirst(name.count + 1)) }
            if entry == "ACCESS" { return entry }
            return nil
        }
    }
}

struct PresenterFailure: Error, Equatable {
    let reason: String
}

/// A presenter that logs every message to a journal and can be told to misbehave.
final class RecordingPresenter: FilePresenter, @unchecked Sendable {
    enum Behavior: Sendable {
        case answer
        case hangRelinquish
        case failSave
        case failDeletion
        case slowRelinquish(Duration)
    }

    let name: String
    let journal: Journal
    let behavior: Behavior
    private let pathBox: Mutex<ItemPath?>
    /// Runs inside `savePresentedItemChanges` (for example, a coordinated write on its own behalf).
    let onSave: (@Sendable () async throws -> Void)?

    init(_ name: String, at path: ItemPath, journal: Journal, behavior: Behavior = .answer,
         onSave: (@Sendable () async throws -> Void)? = nil) {
        self.name = name
        self.journal = journal
        self.behavior = behavior
        self.pathBox = Mutex(path)
        self.onSave = onSave
    }

    var presentedItemPath: ItemPath? { pathBox.withLock { $0 } }

    private func reacquirer() -> Reacquirer {
        let (journal, name) = (self.journal, self.name)
        return { journal.log("\(name):reacquire") }
    }

    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        journal.log("\(name):relinquishToReader")
        await misbehave()
        return reacquirer()
    }

    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
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

    func savePresentedItemChanges() async throws {
        journal.log("\(name):save")
        if case .failSave = behavior { throw PresenterFailure(reason: "disk full") }
        try await onSave?()
    }

    func accommodatePresentedItemDeletion() async throws {
        journal.log("\(name):accommodateDeletion")
        if case .failDeletion = behavior { throw PresenterFailure(reason: "busy") }
    }

    func accommodatePresentedSubitemDeletion(at path: ItemPath) async throws {
        journal.log("\(name):accommodateSubitemDeletion(\(path))")
        if case .failDeletion = behavior { throw PresenterFailure(reason: "busy") }
    }

    func presentedItemDidChange() async { journal.log("\(name):didChange") }

    func presentedItemDidMove(to newPath: ItemPath) async {
        pathBox.withLock { $0 = newPath }
        journal.log("\(name):didMove(\(newPath))")
    }

    func presentedSubitemDidAppear(at path: ItemPath) async { journal.log("\(name):subitemDidAppear(\(path))") }
    func presentedSubitemDidChange(at path: ItemPath) async { journal.log("\(name):subitemDidChange(\(path))") }
    func presentedSubitem(at oldPath: ItemPath, didMoveTo newPath: ItemPath) async {
        journal.log("\(name):subitemDidMove(\(oldPath)->\(newPath))")
    }
}

/// Collects coordinator events.
final class EventRecorder: CoordinationEventSink {
    private let events = Mutex<[CoordinationEvent]>([])
    func record(_ event: CoordinationEvent) { events.withLock { $0.append(event) } }
    var all: [CoordinationEvent] { events.withLock { $0 } }
}

/// Result box for callback-based requests.
final class ResultBox: Sendable {
    private let value = Mutex<Result<CoordinatedAccess, CoordinationError>?>(nil)
    func set(_ result: Result<CoordinatedAccess, CoordinationError>) { value.withLock { $0 = result } }
    var result: Result<CoordinatedAccess, CoordinationError>? { value.withLock { $0 } }
    var access: CoordinatedAccess? {
        if case .success(let a)? = result { return a }
        return nil
    }
    var error: CoordinationError? {
        if case .failure(let e)? = result { return e }
        return nil
    }
}

func path(_ s: String) -> ItemPath { try! ItemPath(s) }

let testOrigin = AccessOrigin(pid: 4242, uid: 1000, gid: 1000, executable: "test")

/// Polls `condition` until it holds or `timeout` passes; returns whether it held.
@discardableResult
func eventually(timeout: Duration = .seconds(3), _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let end = clock.now + timeout
    while clock.now < end {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

/// Requests `intents` through the callback API and returns the box the completion fills.
@discardableResult
func request(_ coordinator: Coordinator, _ intents: [FileAccessIntent], purpose: String? = nil,
             origin: AccessOrigin = testOrigin, policy: CoordinationPolicy? = nil) -> (RequestID, ResultBox) {
    let box = ResultBox()
    let id = coordinator.coordinate(intents, origin: origin, purpose: purpose, policy: policy) { box.set($0) }
    return (id, box)
}
