/// Who caused an event: the process behind the FUSE request or control-socket call.
public struct EventActor: Sendable, Hashable, Codable {
    public var pid: Int32
    public var uid: UInt32
    /// The executable's path (`/proc/PID/exe`) or name (`/proc/PID/comm`), when known.
    public var executable: String?

    public init(pid: Int32, uid: UInt32, executable: String? = nil) {
        self.pid = pid
        self.uid = uid
        self.executable = executable
    }
}
