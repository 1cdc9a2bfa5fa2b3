/// The mount's control socket: out-of-process presenters and coordinated accesses (docs/protocol.md).
public final class ControlService: Sendable {
    /// Starts serving `BACKING/.coordfs/control.sock` for `daemon`; nil when the mount runs without it.
    static func start(daemon: Daemon) throws(MountError) -> ControlService? { nil }
    func stop() {}
}
