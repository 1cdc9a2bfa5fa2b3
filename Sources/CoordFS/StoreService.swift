/// The mount's document store: snapshots of presented documents, change events and conflicts.
public final class StoreService: Sendable {
    /// Opens `BACKING/.coordfs/store` for `daemon`; nil when the mount runs without it.
    static func start(daemon: Daemon) throws(MountError) -> StoreService? { nil }
    func stop() {}
}
