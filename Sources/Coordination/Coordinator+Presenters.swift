// Presenters: registration, the asks before an access, and the "did" messages after it.
// Every function here that is not public runs with the coordinator lock held.

extension Coordinator {
    // MARK: Registration

    /// Registers `presenter` at its `presentedItemPath` (Apple's `addFilePresenter(_:)`).
    ///
    /// - Parameter owner: who the presenter belongs to, for status and events.
    /// - Throws: ``CoordinationError/presenterHasNoPath`` or ``CoordinationError/presenterAlreadyRegistered(_:)``.
    @discardableResult
    public func addFilePresenter(_ presenter: any FilePresenter, owner: AccessOrigin = .currentProcess) throws(CoordinationError) -> PresenterID {
        guard let path = presenter.presentedItemPath else { throw .presenterHasNoPath }
        return try addFilePresenter(presenter, at: path, owner: owner)
    }

    /// Registers `presenter` at `path`, ignoring its `presentedItemPath` (for adapters of
    /// out-of-process presenters, whose path arrives with the registration message).
    ///
    /// - Parameter credentials: the user the presenter acts for; with them, ``presenterPermissions``
    ///   decides what it hears and what it is asked (nil: everything, as for in-process presenters).
    @discardableResult
    public func addFilePresenter(_ presenter: any FilePresenter, at path: ItemPath,
                                 owner: AccessOrigin = .currentProcess,
                                 credentials: PresenterCredentials? = nil) throws(CoordinationError) -> PresenterID {
        let watcher = registrationWatcher
        let before = watcher?.willRegister(at: path)
        lock.lock()
        if let existing = presenters.byObject[ObjectIdentifier(presenter)] {
            lock.unlock()
            throw .presenterAlreadyRegistered(existing)
        }
        let id = PresenterID(rawValue: nextPresenter)
        nextPresenter += 1
        presentersIssued.store(nextPresenter, ordering: .relaxed)
        presenters.insert(PresenterRecord(id: id, presenter: presenter, path: path, owner: owner, credentials: credentials))
        emit(nil, owner, .presenterRegistered(id, path: path, owner: owner))
        lock.unlock()
        watcher?.registered(id, at: path, before: before)
        return id
    }

    /// Unregisters `presenter` (Apple's `removeFilePresenter(_:)`). Asks pending to it end at once
    /// as "presenter gone"; queued messages to it are dropped. Unknown presenters are ignored.
    public func removeFilePresenter(_ presenter: any FilePresenter) {
        lock.lock()
        var effects = Effects()
        if let id = presenters.byObject[ObjectIdentifier(presenter)], let record = presenters.byID[id] {
            unregister(record, &effects)
        }
        lock.unlock()
        effects.run()
    }

    /// Unregisters the presenter with `id`; see ``removeFilePresenter(_:)``.
    public func removeFilePresenter(id: PresenterID) {
        lock.lock()
        var effects = Effects()
        if let record = presenters.byID[id] {
            unregister(record, &effects)
        }
        lock.unlock()
        effects.run()
    }

    /// The id `presenter` is registered under here, if it is.
    public func presenterID(of presenter: any FilePresenter) -> PresenterID? {
        lock.withLock { presenters.byObject[ObjectIdentifier(presenter)] }
    }

    /// The path the registry holds for a presenter (it follows moves), if registered.
    public func presentedPath(of id: PresenterID) -> ItemPath? {
        lock.withLock { presenters.byID[id]?.path }
    }

    /// Who registered a presenter (its `owner` at registration), if it is registered.
    public func presenterOwner(of id: PresenterID) -> AccessOrigin? {
        lock.withLock { presenters.byID[id]?.owner }
    }

    /// Every registered presenter, in registration order (Apple's `filePresenters`).
    public var filePresenters: [any FilePresenter] {
        lock.withLock { presenters.all.map(\.presenter) }
    }

    /// The number of registered presenters.
    public var presenterCount: Int {
        lock.withLock { presenters.byID.count }
    }

    func unregister(_ record: PresenterRecord, _ effects: inout Effects) {
        presenters.remove(record)
        record.removed = true
        record.mailbox.close()
        // Chains waiting for their user's turn here end as an ask it was not sent (its reacquires
        // waiting there are dropped with the mailbox's messages).
        let turns = record.turns
        record.turns = [:]
        for turn in turns.values {
            for case .chain(let chain, let request) in turn.drain() where !chain.finished {
                chain.turn = nil
                finishChain(chain, of: request, &effects)
            }
        }
        let asks = record.pendingAsks
        for ask in asks where !ask.resolved {
            resolve(ask)
            emit(ask.request, .presenterGone(record.id, ask: ask.kind))
            finishChain(ask.chain, of: ask.request, &effects)
        }
        emit(nil, record.owner, .presenterUnregistered(record.id, path: record.path))
        registrationWatcher?.presentedItemsMayHaveChanged([record.path])
    }

    // MARK: Asks before the access

    /// What one presenter must be asked for one intent.
    struct Need {
        var relinquish: PresenterAsk?
        var save = false
        var accommodate = false
        var subitemDeletion: ItemPath?
    }

    /// One presenter's merged asks for a whole request.
    struct PlanEntry {
        let record: PresenterRecord
        var relinquish: PresenterAsk?
        var save = false
        var accommodate = false
        var subitemDeletions: [ItemPath] = []

        /// Apple's order: relinquish, then save, then accommodate.
        var steps: [PresenterAsk] {
            var steps: [PresenterAsk] = []
            if let relinquish { steps.append(relinquish) }
            if save { steps.append(.saveChanges) }
            if accommodate { steps.append(.accommodateDeletion) }
            for path in subitemDeletions { steps.append(.accommodateSubitemDeletion(path)) }
            return steps
        }
    }

    /// Calls `body` for every presenter `intent` must ask, and what to ask it.
    ///
    /// - read: presenters of the item and of items inside it relinquish to the reader and save
    ///   (not with `withoutChanges`); `immediatelyAvailableMetadataOnly` asks nobody.
    /// - write: presenters of the item relinquish to the writer, then save (`forMerging`) or
    ///   accommodate deletion (`forDeleting`, `forReplacing`); presenters inside the item relinquish
    ///   (`forMoving`) and accommodate deletion (`forDeleting`, `forReplacing`); presenters of
    ///   ancestors accommodate a subitem deletion (`forDeleting`, `forReplacing`).
    ///   `contentIndependentMetadataOnly` asks nobody.
    ///
    /// Presenters the screen does not allow to delay the intent are left out (they are told after).
    @inline(__always)
    func forEachNeed(_ intent: FileAccessIntent, index: Int, excluding: PresenterID?, screen: inout PresenterScreen,
                     _ visit: (PresenterRecord, Need) -> Void) {
        func body(_ record: PresenterRecord, _ need: Need) {
            if screen.mayAsk(record, intent, index: index) { visit(record, need) }
        }
        let path = intent.path
        switch intent.kind {
        case .reading(let options):
            if options.contains(.immediatelyAvailableMetadataOnly) { return }
            let need = Need(relinquish: .relinquishToReader, save: !options.contains(.withoutChanges))
            guard let node = presenters.walk(to: path, ancestor: { _ in }) else { return }
            for record in node.records where record.id != excluding { body(record, need) }
            PresenterRegistry.forEachDescendant(of: node) { record in
                if record.id != excluding { body(record, need) }
            }
        case .writing(let options):
            if options.contains(.contentIndependentMetadataOnly) { return }
            let deleting = intent.isDeleting
            let node = presenters.walk(to: path) { record in
                if deleting && record.id != excluding { body(record, Need(subitemDeletion: path)) }
            }
            guard let node else { return }
            let itemNeed = Need(relinquish: .relinquishToWriter, save: options.contains(.forMerging) && !deleting,
                                accommodate: deleting)
            // A presenter whose item was deleted before is not asked again (a late deletion of a
            // presented document whose folder went first).
            for record in node.records where record.id != excluding && !(deleting && record.itemDeleted) { body(record, itemNeed) }
            if deleting || options.contains(.forMoving) {
                let inner = Need(relinquish: .relinquishToWriter, accommodate: deleting)
                PresenterRegistry.forEachDescendant(of: node) { record in
                    // A presenter whose item was deleted before is not asked again for its folder.
                    if record.id != excluding && !(deleting && record.itemDeleted) { body(record, inner) }
                }
            }
        }
    }

    /// `need` without the asks the presenter does not want (``FilePresenter/wantsAsk(_:)``); nil
    /// when nothing is left to ask it.
    @inline(__always)
    func wanted(_ need: Need, by record: PresenterRecord) -> Need? {
        var need = need
        let presenter = record.presenter
        if let relinquish = need.relinquish, !presenter.wantsAsk(relinquish) { need.relinquish = nil }
        if need.save && !presenter.wantsAsk(.saveChanges) { need.save = false }
        if need.accommodate && !presenter.wantsAsk(.accommodateDeletion) { need.accommodate = false }
        if let path = need.subitemDeletion, !presenter.wantsAsk(.accommodateSubitemDeletion(path)) { need.subitemDeletion = nil }
        if need.relinquish == nil && !need.save && !need.accommodate && need.subitemDeletion == nil { return nil }
        return need
    }

    /// True when some presenter must be asked before `request` (the fast path gives up then).
    func needsAnyAsk(_ request: CoordinatedAccess) -> Bool {
        if presenters.isEmpty { return false }
        var needed = false
        var screen = PresenterScreen(permissions, accessor: request.origin)
        for (index, intent) in request.intents.enumerated() {
            forEachNeed(intent, index: index, excluding: request.origin.presenterID, screen: &screen) { record, need in
                if !needed && wanted(need, by: record) != nil { needed = true }
            }
            if needed { return true }
        }
        return false
    }

    func askPlan(for request: CoordinatedAccess) -> [PlanEntry] {
        if presenters.isEmpty { return [] }
        var plan: [PlanEntry] = []
        var screen = PresenterScreen(permissions, accessor: request.origin)
        // Where each presenter's entry is: one lookup per presenter, however many are concerned.
        var entries: [PresenterID: Int] = [:]
        for (index, intent) in request.intents.enumerated() {
            forEachNeed(intent, index: index, excluding: request.origin.presenterID, screen: &screen) { record, need in
                guard let need = wanted(need, by: record) else { return }
                if need.relinquish == .relinquishToReader, let uid = otherUserTurn(record, request.origin),
                   let turn = record.turns[uid] {
                    // That user's turn at this presenter is taken: the read goes on without asking.
                    noteNotAsked(record, turn, request)
                    return
                }
                let at: Int
                if let found = entries[record.id] {
                    at = found
                } else {
                    plan.append(PlanEntry(record: record))
                    at = plan.count - 1
                    entries[record.id] = at
                }
                if let relinquish = need.relinquish, plan[at].relinquish != .relinquishToWriter {
                    plan[at].relinquish = relinquish
                }
                plan[at].save = plan[at].save || need.save
                plan[at].accommodate = plan[at].accommodate || need.accommodate
                if let sub = need.subitemDeletion, !plan[at].subitemDeletions.contains(sub) {
                    plan[at].subitemDeletions.append(sub)
                }
            }
        }
        return plan
    }

    // MARK: Other users' turns

    /// The uid whose turn `origin`'s asks to `record` take (``PresenterRecord/turns``), or nil when
    /// they take none: the accessor is root or the presenter's own user, or the presenter acts for
    /// no known user (an in-process presenter registered without ``PresenterCredentials``).
    ///
    /// A presenter answers one message at a time (its mailbox), so every ask queued to it delays
    /// the asks behind it. Another user's accesses may ask root's presenter (of a world-readable or
    /// world-writable document, of a shared folder they create and delete in), and a hundred
    /// looping accesses would queue their asks ahead of root's save. So each such user has one turn
    /// at a presenter: one of its ask chains, or one reacquire after its access, queued there or
    /// being answered at a time. Its further chains and reacquires for that presenter wait in the
    /// coordinator, in order, and go to the presenter's queue when the turn is free, behind
    /// whatever root or the presenter's own user queued meanwhile; its further reads are not asked
    /// of the presenter at all while the turn is taken (they go on as if it had not listed the
    /// asks, and it is told after, as ever). Root's and the presenter's own user's asks wait behind
    /// at most one ask of each other user. docs/protocol.md, "Who may delay or refuse what".
    @inline(__always)
    func otherUserTurn(_ record: PresenterRecord, _ origin: AccessOrigin) -> UInt32? {
        guard let own = record.credentials?.uid, origin.uid != 0, origin.uid != own else { return nil }
        return origin.uid
    }

    /// The turn of `uid` at `record`, made when it has none.
    private func userTurn(_ uid: UInt32, at record: PresenterRecord) -> PresenterTurn {
        if let turn = record.turns[uid] { return turn }
        let turn = PresenterTurn()
        record.turns[uid] = turn
        return turn
    }

    /// Sends `chain`'s first ask now, or queues the chain behind its user's turn at its presenter.
    func begin(_ chain: AskChain, of request: CoordinatedAccess, _ effects: inout Effects) {
        let record = chain.record
        guard !record.removed, let uid = otherUserTurn(record, request.origin) else {
            issueNext(chain, of: request, &effects)
            return
        }
        chain.turn = uid
        let turn = userTurn(uid, at: record)
        if turn.taken {
            turn.append(.chain(chain, request))
            return
        }
        turn.taken = true
        chain.holdsTurn = true
        issueNext(chain, of: request, &effects)
    }

    /// `chain` is finishing (answered, past its deadline, its request ended): the turn it holds
    /// passes on; a chain still waiting for the turn is skipped when the turn gets to it.
    func endTurn(_ chain: AskChain, _ effects: inout Effects) {
        guard let uid = chain.turn else { return }
        chain.turn = nil
        if chain.holdsTurn {
            chain.holdsTurn = false
            passTurn(at: chain.record, of: uid, &effects)
        }
    }

    /// The turn of `uid` at `record` is over: the next chain or reacquire of that user's waiting
    /// for it goes to the presenter's queue; with none, the turn is free (its entry goes).
    func passTurn(at record: PresenterRecord, of uid: UInt32, _ effects: inout Effects) {
        guard !record.removed, let turn = record.turns[uid] else { return }
        turn.taken = false
        if turn.notAsked > 1, let last = turn.lastNotAsked {
            emit(nil, last, .presenterNotAsked(record.id, reads: turn.notAsked - 1, presenterPath: record.path))
        }
        turn.notAsked = 0
        turn.lastNotAsked = nil
        while let work = turn.next() {
            switch work {
            case .chain(let chain, let request):
                guard !chain.finished else { continue }
                turn.taken = true
                chain.holdsTurn = true
                issueNext(chain, of: request, &effects)
                return
            case .reacquire(let reacquirer):
                turn.taken = true
                enqueueReacquire(reacquirer, to: record, turnOf: uid)
                return
            }
        }
        record.turns[uid] = nil
    }

    /// `request` holds up another user's request while one of its chains waits for its user's turn:
    /// that chain goes first when the turn passes, before the user's other chains and reacquires
    /// (which hold nothing the other user waits for). Else root's create in a shared folder would
    /// wait, behind the create of nobody's holding the folder, for every deletion of nobody's
    /// queued at the folder's presenter.
    func hurryTurns(of request: CoordinatedAccess) {
        for chain in request.chains where !chain.finished && !chain.holdsTurn {
            if let uid = chain.turn, let turn = chain.record.turns[uid] { turn.hurry(chain) }
        }
    }

    /// A reacquire after an access of `origin`'s, queued to `record` at once, or behind its user's turn.
    func scheduleReacquire(_ reacquirer: @escaping Reacquirer, to record: PresenterRecord, for origin: AccessOrigin) {
        guard !record.removed, let uid = otherUserTurn(record, origin) else {
            record.mailbox.enqueue(reacquirer)
            return
        }
        let turn = userTurn(uid, at: record)
        if turn.taken {
            turn.append(.reacquire(reacquirer))
            return
        }
        turn.taken = true
        enqueueReacquire(reacquirer, to: record, turnOf: uid)
    }

    /// Queues a reacquire that holds `uid`'s turn at `record` until the presenter has run it.
    private func enqueueReacquire(_ reacquirer: @escaping Reacquirer, to record: PresenterRecord, turnOf uid: UInt32) {
        record.mailbox.enqueue { [weak self] in
            await reacquirer()
            self?.reacquireRan(at: record, turnOf: uid)
        }
    }

    /// A reacquire that held `uid`'s turn at `record` has run (called from its mailbox task).
    func reacquireRan(at record: PresenterRecord, turnOf uid: UInt32) {
        lock.lock()
        var effects = Effects()
        passTurn(at: record, of: uid, &effects)
        lock.unlock()
        effects.run()
    }

    /// A read of `request`'s user was not asked of `record` because that user's turn there is
    /// taken. The log says so for the first such read of a turn (its request), and how many more
    /// there were when the turn passes: at most two records a turn, so a user's looping reads
    /// cannot flood the log through this (and they count in its share of the log as any record of
    /// its accesses).
    func noteNotAsked(_ record: PresenterRecord, _ turn: PresenterTurn, _ request: CoordinatedAccess) {
        turn.notAsked += 1
        if turn.notAsked == 1 {
            emit(request, .presenterNotAsked(record.id, reads: 1, presenterPath: record.path))
        } else {
            turn.lastNotAsked = request.origin
        }
    }

    /// Sends the chain's next ask, or closes the chain when it has none left.
    func issueNext(_ chain: AskChain, of request: CoordinatedAccess, _ effects: inout Effects) {
        let record = chain.record
        guard chain.index < chain.steps.count, !record.removed, request.phase == .askingPresenters else {
            finishChain(chain, of: request, &effects)
            return
        }
        let kind = chain.steps[chain.index]
        let ask = AskState(request: request, chain: chain, kind: kind, issuedAt: MonotonicClock.now())
        chain.current = ask
        record.pendingAsks.append(ask)
        emit(request, .presenterAsked(record.id, ask: kind, presenterPath: record.path))
        let deadline = request.policy.askDeadline
        ask.timer = DeadlineScheduler.shared.schedule(after: deadline) { [weak self] in
            self?.askDeadlinePassed(ask, deadline: deadline)
        }
        let presenter = record.presenter
        let origin = request.origin
        record.mailbox.enqueue { [weak self] in
            // Skip asks that ended (cancelled, timed out) while queued behind earlier messages.
            guard let self, self.isLive(ask) else { return }
            let outcome: AskOutcome
            switch kind {
            case .relinquishToReader:
                outcome = .answered(await presenter.relinquishPresentedItem(toReader: origin))
            case .relinquishToWriter:
                outcome = .answered(await presenter.relinquishPresentedItem(toWriter: origin))
            case .saveChanges:
                do { try await presenter.savePresentedItemChanges(); outcome = .answered(nil) } catch { outcome = .failed(error) }
            case .accommodateDeletion:
                do { try await presenter.accommodatePresentedItemDeletion(); outcome = .answered(nil) } catch { outcome = .failed(error) }
            case .accommodateSubitemDeletion(let path):
                do { try await presenter.accommodatePresentedSubitemDeletion(at: path); outcome = .answered(nil) } catch { outcome = .failed(error) }
            }
            self.askFinished(ask, outcome)
        }
    }

    func isLive(_ ask: AskState) -> Bool {
        lock.withLock { !ask.resolved }
    }

    func resolve(_ ask: AskState) {
        ask.resolved = true
        if let timer = ask.timer {
            DeadlineScheduler.shared.cancel(timer)
            ask.timer = nil
        }
        let record = ask.chain.record
        if let at = record.pendingAsks.firstIndex(where: { $0 === ask }) {
            record.pendingAsks.remove(at: at)
        }
    }

    func finishChain(_ chain: AskChain, of request: CoordinatedAccess, _ effects: inout Effects) {
        guard !chain.finished else { return }
        chain.finished = true
        endTurn(chain, &effects)
        request.openChains -= 1
        if request.openChains == 0 && request.phase == .askingPresenters {
            grant(request, &effects)
        }
    }

    /// A presenter answered (called from its mailbox task).
    func askFinished(_ ask: AskState, _ outcome: AskOutcome) {
        lock.lock()
        var effects = Effects()
        let request = ask.request
        let record = ask.chain.record
        if ask.resolved {
            // A late answer (after a timeout or cancel). A reacquirer still runs after the access,
            // or right away if the access is already over.
            if case .answered(let reacquirer?) = outcome {
                if request.phase == .askingPresenters || request.phase == .granted {
                    request.reacquirers.append((record, reacquirer))
                } else {
                    emit(request, .reacquireScheduled(record.id))
                    scheduleReacquire(reacquirer, to: record, for: request.origin)
                }
            }
            lock.unlock()
            return
        }
        resolve(ask)
        switch outcome {
        case .answered(let reacquirer):
            emit(request, .presenterAnswered(record.id, ask: ask.kind, latencyNanos: MonotonicClock.now() &- ask.issuedAt))
            if let reacquirer { request.reacquirers.append((record, reacquirer)) }
            ask.chain.index += 1
            ask.chain.current = nil
            issueNext(ask.chain, of: request, &effects)
        case .failed(let error):
            emit(request, .presenterFailed(record.id, ask: ask.kind, error: String(describing: error)))
            fail(request, .presenterFailed(request.id, presenter: record.id, ask: ask.kind, underlying: error), &effects)
        }
        lock.unlock()
        effects.run()
    }

    func askDeadlinePassed(_ ask: AskState, deadline: Duration) {
        lock.lock()
        var effects = Effects()
        let request = ask.request
        if !ask.resolved && request.phase == .askingPresenters {
            resolve(ask)
            let presenter = ask.chain.record.id
            emit(request, .presenterTimedOut(presenter, ask: ask.kind, deadline: deadline))
            request.timedOut.append(presenter)
            switch request.policy.onAskTimeout {
            case .strict:
                fail(request, .presenterTimedOut(request.id, presenter: presenter, ask: ask.kind, deadline: deadline), &effects)
            case .proceed:
                // An unresponsive presenter is not asked the rest of its chain: one deadline per presenter.
                finishChain(ask.chain, of: request, &effects)
            }
        }
        lock.unlock()
        effects.run()
    }

    // MARK: "Did" messages after the access

    func announce(_ change: AccessChange, during access: CoordinatedAccess) {
        lock.lock()
        emit(access, .announced(change))
        // The gate (other nodes) hears of every change, whoever presents it here: with the access's
        // changes when it ends, or now when it ended already (as a change outside any access).
        let ended = access.phase == .released
        if access.gatePass != nil && access.phase == .granted { access.gateChanges.append(change) }
        // (Without the lock, once this is done.)
        defer { if ended { gate?.changedOutsideAccess([change], origin: access.origin) } }
        if !mayConcernPresenters(change, during: access) {
            // Nobody presents the item or anything above it: nothing to deliver, nothing to keep.
            // (A presenter registered later in this access hears of it only when the holder saw
            // the item change after it registered: `tellsChange(to:)`, which keeps the access
            // out of this shortcut.)
            lock.unlock()
            return
        }
        let pendingChange = record(change)
        if access.phase == .granted {
            access.announcements.append(pendingChange)
        } else {
            deliver([pendingChange], origin: access.origin, requestID: access.id, intents: [], audience: access)
        }
        lock.unlock()
    }

    /// False when no presenter could be told about `change` (none at or above its path).
    @inline(__always)
    func mayConcernPresenters(_ change: AccessChange, during access: CoordinatedAccess) -> Bool {
        if presenters.isEmpty { return false }
        let path: ItemPath
        switch change {
        case .changed(let p), .deleted(let p), .subitemAppeared(let p): path = p
        case .moved: return true
        }
        if !access.presentersNearby && access.lateToldBefore == 0 && access.intents.count == 1 && access.intents[0].path == path {
            return false
        }
        var found = false
        guard let node = presenters.walk(to: path, ancestor: { _ in found = true }) else { return found }
        return found || !node.records.isEmpty
    }

    /// Captures what a change means for the registry now; a move re-keys presenters at once.
    func record(_ change: AccessChange) -> PendingAnnouncement {
        switch change {
        case .changed(let path): return .changed(path)
        case .deleted(let path): return .deleted(path)
        case .subitemAppeared(let path): return .appeared(path)
        case .moved(let from, let to):
            let replaced = presenters.presenters(at: to)
            let moved = from == to ? [] : presenters.move(from: from, to: to)
            // An item is at the path of each of them now (``PresenterRecord/itemDeleted``).
            for record in replaced { record.itemDeleted = false }
            for (record, old) in moved where old == from { record.itemDeleted = false }
            return .moved(from: from, to: to, moved: moved, replaced: replaced)
        }
    }

    /// Queues the "did" messages for `announcements` (after the access's own asks, before its reacquirers).
    /// Presenters registered after `audience` (the access) was granted are not told that it changed
    /// an item (the change may be older than their registration, which read it), only of what it
    /// moved, made appear or deleted, unless its holder saw the item change after they registered
    /// (``CoordinatedAccess/tellsChange(to:)``). Presenters with an id of `registeredBefore` or
    /// above hear nothing of `announcements` (a change told late, made before they registered).
    func deliver(_ announcements: [PendingAnnouncement], origin: AccessOrigin, requestID: RequestID?,
                 intents: [FileAccessIntent], audience: CoordinatedAccess? = nil, registeredBefore: UInt64 = .max) {
        if presenters.isEmpty { return }
        if let watcher = registrationWatcher {
            var paths: [ItemPath] = []
            for announcement in announcements {
                switch announcement {
                case .changed(let p), .deleted(let p), .appeared(let p): paths.append(p)
                case .moved(let from, let to, let moved, _):
                    paths.append(from); paths.append(to)
                    for (record, _) in moved { paths.append(record.path) }
                }
            }
            watcher.presentedItemsMayHaveChanged(paths)
        }
        let excluded = origin.presenterID
        var out: [(PresenterRecord, PresenterNotification)] = []
        var screen = PresenterScreen(permissions, accessor: origin)
        // Each (presenter, message) once, found in O(1): a document with many presenters costs
        // each of them one step, not a search through the others.
        var seen: Set<NotificationKey> = []
        func add(_ record: PresenterRecord, _ note: PresenterNotification) {
            guard record.id != excluded, !record.removed, record.id.rawValue < registeredBefore else { return }
            // A presenter hears only of items its user could see; a move it sees one side of is,
            // for it, an item that went away or appeared.
            let screened: PresenterNotification
            switch note {
            case .itemDidChange(let p), .subitemDidChange(let p), .subitemDeleted(let p), .subitemDidAppear(let p), .itemDidDelete(let p):
                guard screen.maySee(record, p) else { return }
                screened = note
            case .itemDidMove(let from, let to):
                guard screen.maySee(record, to) else {
                    if screen.maySee(record, from) { add(record, .itemDidChange(from)) }
                    return
                }
                screened = note
            case .subitemDidMove(let from, let to):
                switch (screen.maySee(record, from), screen.maySee(record, to)) {
                case (true, true): screened = note
                case (true, false): screened = .subitemDeleted(from)
                case (false, true): screened = .subitemDidAppear(to)
                case (false, false): return
                }
            }
            guard seen.insert(NotificationKey(presenter: record.id, note: screened)).inserted else { return }
            out.append((record, screened))
        }
        // A move re-keys its presenters when it is recorded, so a change recorded before it in the
        // same access would reach, at delivery, the presenters the move brought to its path since
        // (a rename over a presented document of a presented file: `b` changed, then `a`'s
        // presenters arrived there with their file, which did not change). Each change skips the
        // presenters a later move of the batch brought.
        var arrivedLater: [Set<PresenterID>] = []
        if announcements.count > 1, announcements.dropFirst().contains(where: { if case .moved = $0 { true } else { false } }) {
            var later = Set<PresenterID>()
            arrivedLater = Array(repeating: [], count: announcements.count)
            for i in announcements.indices.reversed() {
                arrivedLater[i] = later
                if case .moved(_, _, let moved, _) = announcements[i] { for (record, _) in moved { later.insert(record.id) } }
            }
        }
        for (index, announcement) in announcements.enumerated() {
            switch announcement {
            case .changed(let path):
                let arrived = arrivedLater.isEmpty ? [] : arrivedLater[index]
                guard let node = presenters.walk(to: path, ancestor: { record in
                    if !arrived.contains(record.id), audience?.tellsChange(to: record.id) ?? true { add(record, .subitemDidChange(path)) }
                }) else { break }
                for record in node.records where !arrived.contains(record.id) && (audience?.tellsChange(to: record.id) ?? true) {
                    add(record, .itemDidChange(path))
                }
                for record in node.records where record.id.rawValue < registeredBefore { record.itemDeleted = false }
            case .deleted(let path):
                let node = presenters.walk(to: path, ancestor: { add($0, .subitemDeleted(path)) })
                // Presenters that were not asked to accommodate the deletion also learn the item changed
                // (all Foundation would tell them).
                let accommodated = intents.contains { $0.isDeleting && $0.path.isSameOrAncestor(of: path) }
                if let node, !accommodated {
                    for record in node.records where !record.itemDeleted { add(record, .itemDidChange(path)) }
                }
                // Every presenter of the item, or of an item inside it, is told it is gone, once:
                // a presenter whose item was deleted before (rm -rf deletes children before their
                // folders; a presented document's deletion is told late) is not told again.
                if let node {
                    for record in node.records where !record.itemDeleted {
                        add(record, .itemDidDelete(record.path))
                        if record.id.rawValue < registeredBefore { record.itemDeleted = true }
                    }
                    PresenterRegistry.forEachDescendant(of: node) { record in
                        guard !record.itemDeleted else { return }
                        add(record, .itemDidDelete(record.path))
                        if record.id.rawValue < registeredBefore { record.itemDeleted = true }
                    }
                }
            case .appeared(let path):
                guard let node = presenters.walk(to: path, ancestor: { add($0, .subitemDidAppear(path)) }) else { break }
                for record in node.records {
                    add(record, .itemDidChange(path))
                    if record.id.rawValue < registeredBefore { record.itemDeleted = false }
                }
            case .moved(let from, let to, let moved, let replaced):
                for (record, oldPath) in moved {
                    add(record, .itemDidMove(from: oldPath, to: oldPath.replacingPrefix(from, with: to) ?? record.path))
                }
                for record in presenters.ancestors(of: from) { add(record, .subitemDidMove(from: from, to: to)) }
                for record in presenters.ancestors(of: to) { add(record, .subitemDidMove(from: from, to: to)) }
                for record in replaced { add(record, .itemDidChange(to)) }
            }
        }
        for (record, note) in out {
            emit(requestID, origin, .notified(record.id, note))
            let presenter = record.presenter
            record.mailbox.enqueue {
                switch note {
                case .itemDidChange: await presenter.presentedItemDidChange()
                case .itemDidMove(_, let to): await presenter.presentedItemDidMove(to: to)
                case .subitemDidAppear(let path): await presenter.presentedSubitemDidAppear(at: path)
                case .subitemDidChange(let path): await presenter.presentedSubitemDidChange(at: path)
                case .subitemDeleted(let path): await presenter.presentedSubitemDidDelete(at: path)
                case .itemDidDelete: await presenter.presentedItemDidDelete()
                case .subitemDidMove(let from, let to): await presenter.presentedSubitem(at: from, didMoveTo: to)
                }
            }
        }
    }
}

/// One "did" message to one presenter, for telling each presenter a message only once.
struct NotificationKey: Hashable {
    let presenter: PresenterID
    let note: PresenterNotification
}
