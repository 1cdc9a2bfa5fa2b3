import ControlProtocol
import Synchronization

/// One coordfs mount as seen from this process: its mount point, and the shared, self-healing
/// connection to its daemon (one per mount, whatever the number of coordinators and presenters).
public final class CoordFSMount: Sendable {
    /// Where the file system is mounted.
    public let mountPoint: String
    /// The control socket serving it.
    public let socketPath: String
    /// The connection (reconnects after a daemon restart, registering presenters again).
    package let session: ControlSession

    private static let mounts = Mutex<[String: CoordFSMount]>([:])

    private init(mountPoint: String, socketPath: String, locator: ControlSocketLocator) {
        self.mountPoint = mountPoint
        self.socketPath = socketPath
        let options = ControlSession.Options(clientName: CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") })
        self.session = ControlSession(socketPath: {
            // Found again at every reconnection: the daemon may have been remounted.
            (try? locator.locate(mountPoint).socketPath) ?? socketPath
        }, options: options)
    }

    /// The mount containing `path` and the path relative to it.
    /// - Throws: `.notInMount` if no coordfs mount contains `path`.
    public static func containing(_ path: String, locator: ControlSocketLocator = ControlSocketLocator()) throws(CoordFSClientError) -> (CoordFSMount, MountPath) {
        let location: ControlSocketLocator.Location
        do {
            location = try locator.locate(path)
        } catch {
            throw .notInMount(path, reason: error.message)
        }
        let mount = mounts.withLock { table -> CoordFSMount in
            if let existing = table[location.socketPath] { return existing }
            let mount = CoordFSMount(mountPoint: location.mount.mountPoint, socketPath: location.socketPath, locator: locator)
            table[location.socketPath] = mount
            return mount
        }
        return (mount, location.relativePath)
    }

    /// The absolute path of a path inside this mount.
    public func absolutePath(_ path: MountPath) -> String {
        if path.isRoot { return mountPoint }
        return (mountPoint == "/" ? "" : mountPoint) + "/" + path.rawValue
    }

    /// The daemon's status (presenters, held accesses, waiting requests).
    public func status() async throws(CoordFSClientError) -> StatusReport {
        do {
            return try await session.status()
        } catch {
            throw CoordFSClientError(error)
        }
    }
}
