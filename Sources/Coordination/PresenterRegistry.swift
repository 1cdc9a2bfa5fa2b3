import NameBytes

/// One registered presenter. Mutable fields are guarded by the coordinator's lock.
final class PresenterRecord: @unchecked Sendable {
    let id: PresenterID
    let presenter: any FilePresenter
    let owner: AccessOrigin
    /// The user the presenter is screened as (nil: it learns and may delay everything).
    let credentials: PresenterCredentials?
    let mailbox = PresenterMailbox()
    /// Where the presenter is now; follows announced moves.
    var path: ItemPath
    /// Asks sent to this presenter and not yet resolved, from any request.
    var pendingAsks: [AskState] = []
    /// The turns of users other than root and the presenter's own at this presenter, by the
    /// accessor's uid (``Coordinator/otherUserTurn(_:_:)``): one ask chain or one reacquire of
    /// such a user queued to the presenter or being answered at a time, what else it has for the
    /// presenter waiting here in order; a read of a user with an entry here is not asked of this
    /// presenter. An entry lives while its turn is taken.
    var turns: [UInt32: PresenterTurn] = [:]
    var removed = false
    /// The presented item was deleted (the presenter was told so) and has not existed since as far
    /// as the coordinator knows: a later deletion of it or of a folder above it neither asks the
    /// presenter nor tells it again. Cleared when the item changes, appears or a move brings it (or another
    /// item) to the presenter's path.
    var itemDeleted = false

    init(id: PresenterID, presenter: any FilePresenter, path: ItemPath, owner: AccessOrigin,
         credentials: PresenterCredentials? = nil) {
        self.id = id
        self.presenter = presenter
        self.path = path
        self.owner = owner
        self.credentials = credentials
    }
}

/// One other user's turn at one presenter (``PresenterRecord/turns``). Guarded by the coordinator's lock.
final class PresenterTurn {
    /// What waits for the turn: an ask chain (its request is asking presenters) or a reacquire.
    enum Work {
        case chain(AskChain, CoordinatedAccess)
        case reacquire(Reacquirer)
    }

    /// One of the user's asks (a chain's, or a reacquire) is queued to the presenter or being answered.
    var taken = false
    /// What the user has for the presenter next, in order.
    private(set) var waiting: [Work] = []
    private var head = 0
    /// Reads of the user not asked of the presenter while the turn was taken (``Coordinator/noteNotAsked``).
    var notAsked = 0
    /// Who made the last of them (the actor of the record that counts them).
    var lastNotAsked: AccessOrigin?

    func append(_ work: Work) { waiting.append(work) }

    /// The next work waiting, or nil.
    func next() -> Work? {
        guard head < waiting.count else { return nil }
        let work = waiting[head]
        head += 1
        if head == waiting.count {
            waiting.removeAll()
            head = 0
        } else if head > 64 && head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
        return work
    }

    /// Moves `chain` to the front of what waits (its request holds up another user's).
    func hurry(_ chain: AskChain) {
        guard let at = waiting[head...].firstIndex(where: { if case .chain(let c, _) = $0 { c === chain } else { false } }),
              at > head else { return }
        let work = waiting.remove(at: at)
        waiting.insert(work, at: head)
    }

    /// Everything still waiting (the presenter went away).
    func drain() -> [Work] {
        defer { waiting = []; head = 0 }
        return Array(waiting[head...])
    }
}

/// Presenters keyed by path components: every lookup costs the depth of the path, whatever the
/// number of presenters registered elsewhere. Not thread-safe; the coordinator's lock guards it.
struct PresenterRegistry {
    let root: PathNode
    private(set) var byID: [PresenterID: PresenterRecord] = [:]
    private(set) var byObject: [ObjectIdentifier: PresenterID] = [:]

    init(root: PathNode) {
        self.root = root
    }

    var isEmpty: Bool { byID.isEmpty }

    mutating func insert(_ record: PresenterRecord) {
        byID[record.id] = record
        byObject[ObjectIdentifier(record.presenter)] = record.id
        attach(record)
    }

    mutating func remove(_ record: PresenterRecord) {
        byID[record.id] = nil
        byObject[ObjectIdentifier(record.presenter)] = nil
        byID.shrinkIfSparse()
        byObject.shrinkIfSparse()
        detach(record)
    }

    private func attach(_ record: PresenterRecord) {
        var node = root
        for component in record.path.components {
            node.descendantPresenters += 1
            var made = false
            node = node.child(named: component, made: &made)
        }
        node.records.append(record)
    }

    private func detach(_ record: PresenterRecord) {
        _ = Self.detach(record, from: root, components: record.path.components, index: 0)
    }

    /// Removes `record` below `node`; returns true when `node` became empty and can be pruned.
    private static func detach(_ record: PresenterRecord, from node: PathNode, components: [String], index: Int) -> Bool {
        if index == components.count {
            node.records.remove(record)
        } else {
            let key = ExactName(components[index])
            guard let child = node.child(named: components[index]) else { return false }
            node.descendantPresenters -= 1
            if detach(record, from: child, components: components, index: index + 1) {
                node.removeChild(key)
            }
        }
        return node.isUnused && node.children.isEmpty
    }

    /// The node at `path`, calling `ancestor` for every presenter at a strict ancestor on the way.
    @inline(__always)
    func walk(to path: ItemPath, ancestor: (PresenterRecord) -> Void) -> PathNode? {
        var node = root
        for component in path.components {
            for record in node.records { ancestor(record) }
            guard let next = node.child(named: component) else { return nil }
            node = next
        }
        return node
    }

    /// Presenters at strict ancestors of `path`.
    func ancestors(of path: ItemPath) -> [PresenterRecord] {
        var result: [PresenterRecord] = []
        _ = walk(to: path) { result.append($0) }
        return result
    }

    /// Presenters exactly at `path`.
    func presenters(at path: ItemPath) -> [PresenterRecord] {
        walk(to: path) { _ in }.map { Array($0.records) } ?? []
    }

    /// Calls `body` for every presenter strictly inside `node`.
    static func forEachDescendant(of node: PathNode, _ body: (PresenterRecord) -> Void) {
        guard node.descendantPresenters > 0 else { return }
        for child in node.children.values {
            for record in child.records { body(record) }
            forEachDescendant(of: child, body)
        }
    }

    /// Presenters at `path` or inside it.
    func presenters(atOrBelow path: ItemPath) -> [PresenterRecord] {
        guard let node = walk(to: path, ancestor: { _ in }) else { return [] }
        var result = Array(node.records)
        Self.forEachDescendant(of: node) { result.append($0) }
        return result
    }

    /// Re-keys every presenter at or below `from` to the same place under `to`. Returns each moved
    /// record with its old path.
    mutating func move(from: ItemPath, to: ItemPath) -> [(record: PresenterRecord, oldPath: ItemPath)] {
        let moving = presenters(atOrBelow: from)
        var moved: [(record: PresenterRecord, oldPath: ItemPath)] = []
        moved.reserveCapacity(moving.count)
        for record in moving {
            guard let newPath = record.path.replacingPrefix(from, with: to) else { continue }
            detach(record)
            let old = record.path
            record.path = newPath
            attach(record)
            moved.append((record, old))
        }
        return moved
    }

    /// How many presenters are registered.
    var count: Int { byID.count }
    /// Every presenter, in id order.
    var all: [PresenterRecord] { byID.values.sorted { $0.id < $1.id } }
}
