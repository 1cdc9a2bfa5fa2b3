import Coordination
import MountPolicy

/// The document store's hooks for one granted plan. Which of the plan's paths are presented
/// documents is looked at once, when the access is granted, and holds for the whole plan (a move
/// told by an earlier step does not make the destination a document for a later one).
struct StoreView {
    private let hooks: (any DocumentHooks)?
    private let origin: AccessOrigin
    private let looks: [(path: ItemPath, atOrBelow: Bool, presented: Bool)]

    init(_ fs: CoordinatedFileSystem, origin: AccessOrigin, before: [StoreStep], done: [Step]) {
        let hooks = fs.storeHooks
        self.hooks = hooks
        self.origin = origin
        var looks: [(path: ItemPath, atOrBelow: Bool, presented: Bool)] = []
        func look(_ p: ItemPath, atOrBelow: Bool) {
            guard !looks.contains(where: { $0.path == p && $0.atOrBelow == atOrBelow }) else { return }
            looks.append((p, atOrBelow, atOrBelow ? fs.coordinator.isPresented(atOrBelow: p) : fs.coordinator.isPresented(p)))
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

    /// True when `p` was a presented document at the grant (for paths the plan names).
    func isPresented(_ p: ItemPath, atOrBelow: Bool = false) -> Bool {
        looks.first { $0.path == p && $0.atOrBelow == atOrBelow }?.presented ?? false
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
