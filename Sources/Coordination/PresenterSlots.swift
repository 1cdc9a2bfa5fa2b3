/// Presenters in the order they were added, with O(1) insertion, removal and "first owned by a
/// process" (amortized): a path presented 100,000 times costs each registration, each removal and
/// each lookup one step, never a search through the others.
///
/// Removed presenters leave a hole; the slots are compacted (and their memory given back) once
/// holes outnumber the presenters. Not thread-safe; the coordinator's lock guards it.
struct PresenterSlots: Sequence {
    private var slots: [PresenterRecord?] = []
    private var positions: [PresenterID: Int] = [:]
    /// No presenter before this slot.
    private var head = 0
    /// Each owning process's presenters here, in the same order.
    private var byProcess: [Int32: ProcessSlots] = [:]

    /// One process's presenters at the path (the same scheme, without an index by process).
    private struct ProcessSlots {
        var slots: [PresenterRecord?] = []
        var positions: [PresenterID: Int] = [:]
        var head = 0
    }

    var isEmpty: Bool { positions.isEmpty }
    var count: Int { positions.count }

    mutating func append(_ record: PresenterRecord) {
        guard positions[record.id] == nil else { return }
        Self.append(record, &slots, &positions)
        // Taken out and put back, so the arrays are never shared (and copied) while they grow.
        var own = byProcess.removeValue(forKey: record.owner.pid) ?? ProcessSlots()
        Self.append(record, &own.slots, &own.positions)
        byProcess[record.owner.pid] = own
    }

    /// Removes `record`; false when it was not here.
    @discardableResult
    mutating func remove(_ record: PresenterRecord) -> Bool {
        guard Self.remove(record.id, &slots, &positions, &head) else { return false }
        let pid = record.owner.pid
        if var own = byProcess.removeValue(forKey: pid) {
            Self.remove(record.id, &own.slots, &own.positions, &own.head)
            if !own.positions.isEmpty { byProcess[pid] = own }
        }
        if byProcess.isEmpty { byProcess = [:] }
        return true
    }

    /// The first presenter (in order of addition) owned by process `pid`.
    func first(ownedBy pid: Int32) -> PresenterRecord? {
        guard let own = byProcess[pid] else { return nil }
        return own.slots[own.head...].lazy.compactMap { $0 }.first
    }

    func makeIterator() -> some IteratorProtocol<PresenterRecord> {
        slots[head...].lazy.compactMap { $0 }.makeIterator()
    }

    private static func append(_ record: PresenterRecord, _ slots: inout [PresenterRecord?], _ positions: inout [PresenterID: Int]) {
        positions[record.id] = slots.count
        slots.append(record)
    }

    @discardableResult
    private static func remove(_ id: PresenterID, _ slots: inout [PresenterRecord?], _ positions: inout [PresenterID: Int], _ head: inout Int) -> Bool {
        guard let at = positions.removeValue(forKey: id) else { return false }
        slots[at] = nil
        if positions.isEmpty {
            // Let go of the memory too: a path's presenters may all leave at once.
            slots = []
            positions = [:]
            head = 0
            return true
        }
        if at == head {
            while head < slots.count && slots[head] == nil { head += 1 }
        }
        if slots.count >= 64 && positions.count * 2 < slots.count {
            let kept: [PresenterRecord] = slots.compactMap { $0 }
            var renumbered: [PresenterID: Int] = [:]
            renumbered.reserveCapacity(kept.count)
            for (i, record) in kept.enumerated() { renumbered[record.id] = i }
            slots = kept
            positions = renumbered
            head = 0
        }
        return true
    }
}

extension Dictionary {
    /// Gives back the memory of a dictionary most of whose entries were removed (removing keeps
    /// the capacity): after 100,000 presenters leave, the tables that held them shrink too.
    /// Amortized O(1) per removal (it rebuilds only after three quarters of the capacity emptied).
    /// `keeping`: a capacity it may keep however empty (a table that fills again and again).
    public mutating func shrinkIfSparse(keeping kept: Int = 256) {
        guard capacity > kept, count * 4 < capacity else { return }
        self = Dictionary(uniqueKeysWithValues: map { ($0.key, $0.value) })
    }
}
