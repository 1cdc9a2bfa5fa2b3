import Coordination
import Synchronization
import Testing

/// Records every access while its accessor runs and checks, independently of the coordinator's
/// own code, that no two running accesses break the exclusion rules.
final class InvariantChecker: Sendable {
    struct Running {
        let token: Int
        let path: ItemPath
        /// 0 read, 1 write, 2 write holding off the subtree.
        let mode: Int
        let purpose: String?
    }

    private let state = Mutex<(running: [Running], violations: [String], completed: Int, maxConcurrent: Int)>(([], [], 0, 0))

    static func mode(of intent: FileAccessIntent) -> Int {
        guard case .writing(let o) = intent.kind else { return 0 }
        return o.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing]) ? 1 : 2
    }

    static func conflict(_ a: Running, _ b: Running) -> Bool {
        if let p = a.purpose, p == b.purpose { return false }
        if a.path == b.path { return a.mode != 0 || b.mode != 0 }
        if a.path.isAncestor(of: b.path) { return a.mode == 2 }
        if b.path.isAncestor(of: a.path) { return b.mode == 2 }
        return false
    }

    func enter(token: Int, intents: [FileAccessIntent], purpose: String?) {
        let mine = intents.map { Running(token: token, path: $0.path, mode: Self.mode(of: $0), purpose: purpose) }
        state.withLock { s in
            for m in mine {
                for other in s.running where other.token != token && Self.conflict(m, other) {
                    s.violations.append("\(m.path)/\(m.mode) overlaps \(other.path)/\(other.mode)")
                }
            }
            s.running.append(contentsOf: mine)
            s.maxConcurrent = max(s.maxConcurrent, Set(s.running.map(\.token)).count)
        }
    }

    func exit(token: Int) {
        state.withLock { s in
            s.running.removeAll { $0.token == token }
            s.completed += 1
        }
    }

    var violations: [String] { state.withLock { $0.violations } }
    var completed: Int { state.withLock { $0.completed } }
    var maxConcurrent: Int { state.withLock { $0.maxConcurrent } }
}

/// SplitMix64: a seeded generator so a failure can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A presenter that answers every ask at once, sometimes with a reacquirer.
final class QuickPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemPath: ItemPath?
    let messages = ResultCounter()
    init(_ path: ItemPath) { presentedItemPath = path }
    func relinquishPresentedItem(toReader reader: AccessOrigin) async -> Reacquirer? {
        messages.increment()
        return { [messages] in messages.increment() }
    }
    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? {
        messages.increment()
        return nil
    }
    func savePresentedItemChanges() async throws { messages.increment() }
    func presentedItemDidChange() async { messages.increment() }
}

let randomTree = ["", "a", "a/b", "a/b/c", "a/d", "e", "e/f", "g"].map(path)

enum RandomIntents {
    static func randomIntent(_ rng: inout SeededGenerator) -> FileAccessIntent {
        let p = randomTree[Int.random(in: 0..<randomTree.count, using: &rng)]
        switch Int.random(in: 0..<10, using: &rng) {
        case 0...3: return .readingIntent(with: p, options: Bool.random(using: &rng) ? [] : .withoutChanges)
        case 4: return .readingIntent(with: p, options: .immediatelyAvailableMetadataOnly)
        case 5: return .writingIntent(with: p)
        case 6: return .writingIntent(with: p, options: .forMerging)
        case 7: return .writingIntent(with: p, options: .forDeleting)
        case 8: return .writingIntent(with: p, options: .forMoving)
        default: return .writingIntent(with: p, options: .forReplacing)
        }
    }
}

@Suite struct RandomizedConcurrencyTests {
    @Test(arguments: [UInt64(0x5EED_0001), UInt64(0x5EED_0002)])
    func randomIntentsNeverOverlapAndAllComplete(seed: UInt64) async throws {
        let coordinator = Coordinator()
        let presenters = ["a/b", "e", "", "a/b/c"].map { QuickPresenter(path($0)) }
        for p in presenters { try coordinator.addFilePresenter(p) }
        let checker = InvariantChecker()
        let workers = 12, operations = 100
        let failures = ResultCounter()
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var rng = SeededGenerator(state: seed &+ UInt64(worker) &* 7919)
                    for op in 0..<operations {
                        let token = worker * 10_000 + op
                        var intents = [RandomIntents.randomIntent(&rng)]
                        if Int.random(in: 0..<4, using: &rng) == 0 { intents.append(RandomIntents.randomIntent(&rng)) }
                        let purpose: String? = Int.random(in: 0..<10, using: &rng) == 0 ? "shared" : nil
                        let hold = UInt64.random(in: 0...200, using: &rng)
                        let useFileCoordinator = Bool.random(using: &rng)
                        do {
                            if useFileCoordinator {
                                let fc = FileCoordinator(coordinator: coordinator)
                                if let purpose { fc.purposeIdentifier = purpose }
                                try await fc.coordinate(with: intents) { granted in
                                    checker.enter(token: token, intents: granted, purpose: purpose)
                                    if hold > 100 { try? await Task.sleep(for: .microseconds(hold)) }
                                    checker.exit(token: token)
                                }
                            } else {
                                let access: CoordinatedAccess
                                if let fast = coordinator.tryCoordinateImmediately(intents, origin: testOrigin, purpose: purpose) {
                                    access = fast
                                } else {
                                    access = try await withCheckedThrowingContinuation { c in
                                        coordinator.coordinate(intents, origin: testOrigin, purpose: purpose) {
                                            c.resume(with: $0.mapError { $0 as any Error })
                                        }
                                    }
                                }
                                checker.enter(token: token, intents: access.intents, purpose: purpose)
                                if hold > 100 { try? await Task.sleep(for: .microseconds(hold)) }
                                checker.exit(token: token)
                                access.didChange(access.intents[0].path)
                                access.release()
                            }
                        } catch {
                            failures.increment()
                        }
                    }
                }
            }
        }
        #expect(checker.violations.isEmpty, "\(checker.violations.prefix(5))")
        #expect(failures.value == 0)
        #expect(checker.completed == workers * operations)
        #expect(checker.maxConcurrent > 1, "the test did run accesses side by side")
        let status = coordinator.status()
        #expect(status.held.isEmpty && status.waiting.isEmpty)
        #expect(presenters.reduce(0) { $0 + $1.messages.value } > 0)
    }
}
