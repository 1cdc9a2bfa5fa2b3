import Coordination
import FuseKit
import Glibc
import MountPolicy
import SystemPackage

/// Performing `OperationPolicy`'s plans: the save recogniser's steps, the store's hooks, the change,
/// what is told, and releasing the accesses.
extension CoordinatedFileSystem {
    /// A fact: whether `p` is a file created moments ago that nobody has been told of, and by whom.
    func freshness(_ p: ItemPath, for pid: pid_t) -> Freshness {
        guard let creator = saves.creator(of: p) else { return .told }
        return creator == pid ? .byCaller : .byAnother
    }

    /// Performs save-recogniser steps. False when a `settleFresh` found nothing waiting (the file's
    /// window just closed): ask the policy again with the file told.
    func perform(_ steps: [SaveStep], by pid: pid_t, settled: inout (@Sendable () -> Void)?) -> Bool {
        for step in steps {
            switch step {
            case .finishWrites(let p): finishWrites(of: p, by: pid)
            case .moveArrives(let p, let back): saves.moveArrives(at: p, unlessBackTo: back)
            case .revealFresh(let p): saves.settle(p)?()
            case .settleFresh(let p):
                guard let reveal = saves.settle(p) else { return false }
                settled = reveal
            }
        }
        return true
    }

    func perform(_ steps: [SaveStep], by pid: pid_t) {
        var settled: (@Sendable () -> Void)?
        _ = perform(steps, by: pid, settled: &settled)
    }

    /// Performs a granted plan around `change` (the I/O): the store's hooks before, the change, what
    /// is told after it succeeded (or the settled file told after all when it failed); then releases
    /// the accesses, but one a save in progress keeps.
    func perform(_ plan: Plan, _ grant: Grant, adopted held: Grant? = nil, settled: (@Sendable () -> Void)? = nil,
                 _ change: () -> Errno?) -> Errno? {
        let store = StoreView(self, origin: grant.origin, before: plan.before, done: plan.done)
        for step in plan.before { store.run(step) }
        let e = change()
        var kept = false
        if e == nil {
            perform(plan.done, grant, adopted: held, store, kept: &kept)
        } else if plan.revealsSettledOnFailure {
            settled?() // it stays where it is: told after all
        }
        if !kept { grant.release() }
        held?.release()
        return e
    }

    /// Performs steps under `grant` (a close's, a create's folder access), the store looked at now.
    /// Returns whether the document store may have run a hook (a path of the steps was presented).
    @discardableResult
    func perform(_ steps: [Step], _ grant: Grant) -> Bool {
        guard !steps.isEmpty else { return false }
        var kept = false
        let store = StoreView(self, origin: grant.origin, before: [], done: steps)
        perform(steps, grant, adopted: nil, store, kept: &kept)
        return store.mayRunHooks
    }

    private func perform(_ steps: [Step], _ grant: Grant, adopted held: Grant?, _ store: StoreView, kept: inout Bool) {
        for step in steps {
            switch step {
            case .store(let s): store.run(s)
            case .announce(let change): grant.announce(change)
            case .announceAdopted(let change): (held ?? grant).announce(change)
            case .saved(let p): saves.saved(p, by: grant.origin.pid)
            case .beginSave(let p, let departure, let otherwise):
                if let access = grant.access {
                    saves.begin(p, access: access, departure: departure)
                    kept = true
                } else {
                    grant.announce(otherwise)
                }
            case .appearsLater(let p):
                // Told once it outlived the save window, to the presenters there when it was made: one
                // that registered since (of the file, or of its folder) found it made already.
                let who = grant.origin
                let mark = coordinator.presenterMark
                saves.created(p, by: who.pid) { [coordinator] in
                    coordinator.announce(.subitemAppeared(p), origin: who, toPresentersRegisteredBefore: mark)
                }
            case .ifPresented(let p, let steps):
                if store.isPresented(p) { perform(steps, grant, adopted: held, store, kept: &kept) }
            }
        }
    }
}

/// The document store's hooks for one granted plan. Which of the plan's paths are presented
/// documents is looked at once, when the access is granted, and holds for the whole plan (a move
/// told by an earlier step does not make the destination a document for a later one).
struct StoreView {
    private let hooks: (any DocumentHooks)?
    private let origin: AccessOrigin
    /// The plan's paths that were presented documents at the grant.
    private let looks: [(path: ItemPath, atOrBelow: Bool)]

    init(_ fs: CoordinatedFileSystem, origin: AccessOrigin, before: [StoreStep], done: [Step]) {
        let hooks = fs.storeHooks
        self.hooks = hooks
        self.origin = origin
        // Only the paths that are presented are kept (absent is not presented): a plan on paths
        // nobody presents, the usual one, makes no list.
        var looks: [(path: ItemPath, atOrBelow: Bool)] = []
        func look(_ p: ItemPath, atOrBelow: Bool) {
            if atOrBelow ? fs.coordinator.isPresented(atOrBelow: p) : fs.coordinator.isPresented(p),
               !looks.contains(where: { $0.path == p && $0.atOrBelow == atOrBelow }) {
                looks.append((p, atOrBelow))
            }
        }
        func look(_ steps: [Step]) {
            for step in steps {
                switch step {
                case .store(let s): if hooks != nil { look(s.path, atOrBelow: s.atOrBelow) }
                case .ifPresented(let p, let inner): look(p, atOrBelow: false); look(inner)
                default: break
                }
            }
        }
        if hooks != nil { for s in before { look(s.path, atOrBelow: s.atOrBelow) } }
        look(done)
        self.looks = looks
    }

    /// True when a path of the plan was presented at the grant: a store step may run a hook.
    var mayRunHooks: Bool { hooks != nil && !looks.isEmpty }

    /// True when `p` was a presented document at the grant (for paths the plan names).
    func isPresented(_ p: ItemPath, atOrBelow: Bool = false) -> Bool {
        !looks.isEmpty && looks.contains { $0.path == p && $0.atOrBelow == atOrBelow }
    }

    /// `DocumentHooks.beforeAppend` for a presented document of the plan (nil otherwise).
    func runAppend(_ p: ItemPath) -> Int64? {
        guard let hooks, isPresented(p) else { return nil }
        return hooks.beforeAppend(p)
    }

    func run(_ step: StoreStep) {
        guard let hooks, isPresented(step.path, atOrBelow: step.atOrBelow) else { return }
        switch step {
        case .beforeInPlaceWrite(let p): hooks.beforeInPlaceWrite(p)
        case .beforeReplace(let p): hooks.beforeReplace(p)
        case .beforeDelete(let p): hooks.beforeDelete(p)
        case .didChange(let p): hooks.didChange(p, by: origin)
        case .didDelete(let p): hooks.didDelete(p, by: origin)
        case .didMove(let from, let to): hooks.didMove(from: from, to: to, by: origin)
        }
    }
}

extension StoreStep {
    /// The path whose presentation decides whether the store hears of it.
    var path: ItemPath {
        switch self {
        case .beforeInPlaceWrite(let p), .beforeReplace(let p), .beforeDelete(let p), .didChange(let p), .didDelete(let p): p
        case .didMove(let from, _): from
        }
    }
    /// A move takes the presented documents inside a folder along.
    var atOrBelow: Bool {
        if case .didMove = self { return true }
        return false
    }
}
