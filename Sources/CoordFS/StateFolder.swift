import FuseKit
import Glibc
import LinuxGNU

/// The reserved folder inside the backing folder where a mount keeps its state (the event log, the
/// document store, the control socket, the daemon's pid and log). It does not exist through the mount.
public struct StateFolder: Sendable, Equatable {
    /// Its name in the backing folder's root.
    public static let name = ".coordfs"

    public let path: String
    public init(backing: String) { path = backing + "/" + StateFolder.name }

    public var pidFile: String { path + "/daemon.pid" }
    public var daemonLog: String { path + "/daemon.log" }
    public var controlSocket: String { path + "/control.sock" }
    public var eventLog: String { path + "/log" }
    public var store: String { path + "/store" }

    /// Creates the folder (owner only) if missing.
    public func create() throws(MountError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .system("cannot create the state folder '\(path)': \(String(cString: strerror(errno)))")
        }
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw .system("'\(path)' is reserved for coordfs's state but is not a folder; move it away")
        }
    }

    /// The pid written by a running daemon, if its process is still alive.
    public func runningDaemonPID() -> pid_t? {
        guard let text = readWholeFile(pidFile), let pid = pid_t(text.trimmingCharacters(in: " \n")), pid > 0 else { return nil }
        return kill(pid, 0) == 0 || errno == EPERM ? pid : nil
    }
}

extension String {
    func trimmingCharacters(in set: String) -> String {
        let chars = Set(set)
        var s = Substring(self)
        while let f = s.first, chars.contains(f) { s = s.dropFirst() }
        while let l = s.last, chars.contains(l) { s = s.dropLast() }
        return String(s)
    }
}
