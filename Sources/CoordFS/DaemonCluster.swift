import Cluster
import ClusterKV
import Coordination
import Dispatch
import EtcdKV
import Foundation
import LinuxGNU

/// The mount's side of a cluster node (docs/cluster.md): another node's change reaches the kernel's
/// caches and the document store here, before this node's presenters hear of it.
final class DaemonClusterHost: ClusterHost, @unchecked Sendable {
    weak var daemon: Daemon?
    /// Invalidations go through the kernel, which may wait for a directory a parked request holds:
    /// they run here, and the cluster waits for them at most `invalidationWait`.
    private let kernelQueue = DispatchQueue(label: "coordfs.cluster.invalidate")
    static let invalidationWait = DispatchTimeInterval.milliseconds(200)

    /// Another node's changes among the backing watcher's events (nil: no watcher).
    let echoes: ClusterEchoes?

    init(daemon: Daemon, echoes: ClusterEchoes? = nil) {
        self.daemon = daemon
        self.echoes = echoes
    }

    func clusterChangeBegins(_ intents: [FileAccessIntent]) {
        echoes?.began(intents)
    }

    func clusterChangeEnded(_ intents: [FileAccessIntent], told: Bool) {
        guard let echoes, let watcher = daemon?.backingWatcher else { return }
        for held in echoes.ended(intents, told: told) { watcher.tellHeld(held.path, origin: held.origin, gone: held.gone) }
    }

    func clusterWillLetChangeThrough(_ intents: [FileAccessIntent], origin: AccessOrigin) {
        guard let fs = daemon?.coordinated else { return }
        for intent in intents where intent.isWriting {
            guard let hooks = fs.documents(atOrBelow: intent.path) else { continue }
            if intent.isDeleting { hooks.beforeDelete(intent.path) }
            else if intent.lockMode == .subtreeWrite { hooks.beforeReplace(intent.path) }
            else { hooks.beforeInPlaceWrite(intent.path) }
        }
    }

    func clusterDropCaches(_ changes: [AccessChange]) {
        guard let fs = daemon?.coordinated else { return }
        let done = DispatchSemaphore(value: 0)
        let all = changes.flatMap(\.paths)
        kernelQueue.async {
            for p in all { fs.forgetCached(p) }
            done.signal()
        }
        _ = done.wait(timeout: .now() + Self.invalidationWait)
    }

    func clusterDidChange(_ changes: [AccessChange], origin: AccessOrigin, asked: Bool) -> [AccessChange] {
        // What the backing watcher sees of these changes, read after this, is not told again; what
        // it told already, finding the file as it is now, is not told by the record (its node asked
        // nobody here, so the watcher was not held while it wrote: a folder's presenters here).
        let heard = echoes?.told(changes.flatMap(\.paths), matching: !asked) ?? []
        // A change is the file at its (last) path: a move's destination.
        let already = changes.filter { c in c.paths.last.map(heard.contains) ?? false }
        guard let hooks = daemon?.coordinated?.storeHooks else { return already }
        let changedFiles = Set(changes.compactMap { c -> ItemPath? in if case .changed(let p) = c { p } else { nil } })
        for c in changes where !already.contains(c) {
            switch c {
            case .changed(let p): if daemon?.coordinator.isPresented(p) == true { hooks.didChangeBeside(p, by: origin) }
            case .deleted(let p): if daemon?.coordinator.isPresented(p) == true { hooks.didDelete(p, by: origin) }
            case .moved(let a, let b):
                // A file moved over a document presented here (`mv draft.txt report.txt` by a
                // process that did not make the file): the writing node did not know it was
                // presented, so its record says only that the file moved. The document changed,
                // as one host's mount tells its store (a conflict for unsaved changes, else a
                // reload); then a document presented at the source follows its file.
                if !changedFiles.contains(b), daemon?.coordinator.isPresented(b) == true { hooks.didChangeBeside(b, by: origin) }
                if daemon?.coordinator.isPresented(atOrBelow: a) == true { hooks.didMove(from: a, to: b, by: origin) }
            case .subitemAppeared: break
            }
        }
        return already
    }

    func clusterChangedHere(_ changes: [AccessChange]) {
        echoes?.changedHere(changes.flatMap(\.paths))
    }

    func clusterPresentedItemsMayHaveChanged(_ paths: [ItemPath]) {
        daemon?.coordinated?.presentedInodes.mark(paths)
    }

    func clusterKeepsReadVersions(at path: ItemPath, inside: Bool) -> Bool {
        daemon?.coordinated?.lostUpdates.readBeforeChangeElsewhere(path, inside: inside) ?? false
    }

    func clusterWillYield(_ path: ItemPath, inside: Bool, to node: String) {
        let origin = AccessOrigin(pid: 0, uid: 0, gid: 0, executable: "coordfs@\(node)")
        daemon?.coordinated?.lostUpdates.keepBeforeChangeElsewhere(path, inside: inside, by: origin)
    }

    func clusterChangesMissed(at paths: [ItemPath], origin: AccessOrigin) -> [ItemPath] {
        clusterDropCaches(paths.map { .changed($0) })
        guard let store = daemon?.coordinated?.storeHooks as? StoreService else { return [] }
        return paths.filter { store.didChangeIfNotAsKnown($0, by: origin) }
    }
}

/// Sends the coordinator's events to the cluster node (its presenters mirrored in etcd) and on.
struct ClusterEventTap: CoordinationEventSink {
    let node: ClusterNode
    let next: (any CoordinationEventSink)?
    func record(_ event: CoordinationEvent) {
        node.record(event)
        next?.record(event)
    }
}

extension ClusterOptions {
    /// The etcd client these options describe (the password read from its file).
    func makeStore() throws(MountError) -> any ClusterStore {
        var tls: EtcdConfiguration.TLS?
        if caFile != nil || certificateFile != nil {
            tls = EtcdConfiguration.TLS(caFile: caFile, certificateFile: certificateFile, keyFile: keyFile)
        }
        var credentials: EtcdConfiguration.Credentials?
        do {
            if let user, let passwordFile { credentials = try EtcdConfiguration.Credentials(user: user, passwordFile: passwordFile) }
            return try EtcdClusterStore(EtcdConfiguration(endpoints: endpoints, tls: tls, credentials: credentials))
        } catch {
            throw .system("cannot set up the etcd client: \(error)")
        }
    }

    func configuration() -> ClusterConfiguration {
        ClusterConfiguration(node: nodeName, prefix: prefix, leaseTTL: leaseTTL, unreachable: unreachable,
                             recordInterval: recordInterval, unpresentedRecordInterval: unpresentedRecordInterval)
    }
}

/// Runs `body` on a task and waits for it (the daemon's start and stop are synchronous).
func waitForTask<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do { box.set(.success(try await body())) } catch { box.set(.failure(error)) }
        done.signal()
    }
    done.wait()
    return try box.get()
}

private final class ResultBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<T, Error>?
    func set(_ r: Result<T, Error>) { lock.withLock { result = r } }
    func get() throws -> T { try lock.withLock { result! }.get() }
}

extension Daemon {
    /// Joins the cluster when the mount has `cluster=` (after the store and the control socket, so
    /// every presenter registration reaches the node). The store is given by tests (two daemons over
    /// one `MemoryClusterStore`); otherwise it is the etcd client of the options.
    func startCluster(store given: (any ClusterStore)?) throws(MountError) {
        let options = plan.options.cluster
        guard options.enabled || given != nil, cluster == nil else { return }
        let store: any ClusterStore
        if let given { store = given } else { store = try options.makeStore() }
        let node = ClusterNode(store: store, configuration: options.configuration())
        // With the backing watcher on, another node's writes over one folder are seen there too.
        let watching = backingWatcher
        let echoes = watching.map { _ in ClusterEchoes(stateOf: ClusterEchoes.backingState(plan.state.io.backing)) }
        watching?.clusterEchoes.withLock { $0 = echoes }
        let host = DaemonClusterHost(daemon: self, echoes: echoes)
        node.host = host
        clusterHost = host
        coordinator.eventSink = ClusterEventTap(node: node, next: coordinator.eventSink)
        logClusterSteps(node)
        do {
            try waitForTask { [coordinator] in try await node.start(coordinator: coordinator) }
        } catch {
            throw .system("cannot join the cluster at \(options.endpoints.joined(separator: ",")) as node \(node.name): \(error)")
        }
        cluster = node
        sayOnStandardError("coordfs: node \(node.name) of cluster \(options.prefix) (etcd \(options.endpoints.joined(separator: ",")), lease \(options.leaseTTL) s, unreachable=\(options.unreachable.rawValue))")
    }

    /// The node's steps that say how the cluster stands go to the daemon's log (its stderr):
    /// nodes joining and leaving, its session lost and begun, etcd unreachable and back, accesses
    /// granted locally or past another node; the steps of single accesses do not.
    func logClusterSteps(_ node: ClusterNode) {
        // Only the notable ones: a node nobody watches builds no step of a single access.
        let steps = node.steps(notableOnly: true)
        Task.detached {
            for await step in steps {
                sayOnStandardError("coordfs: cluster: \(step)")
            }
        }
    }

    func stopCluster() {
        guard let node = cluster else { return }
        control?.handler.clusterView.withLock { v in v?.stop(); v = nil }
        _ = try? waitForTask { await node.stop() }
    }
}
