import ArgumentParser
import ControlProtocol
import CoordFS
import CoordFSClient
import CoordFSWeb
import EventLog
import Foundation
import Glibc
import Linux
import NameBytes
import Synchronization

/// `coordfs web MOUNTPOINT`: a page in the browser for what the CLI does (docs/web.md).
struct WebCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "web",
        abstract: "Serve a page showing a mount live: events, status, conflicts, versions, charts.",
        discussion: """
        Prints one URL with a random token and a launcher file that opens it, and serves until \
        Ctrl-C or SIGTERM. Open the launcher (file:///...) in a browser on this machine, or paste the \
        URL into one that is running; --open starts $BROWSER (or xdg-open) on the launcher. Never \
        give the URL itself to a browser's command line (chromium URL, xdg-open URL): a process's \
        arguments are readable by every local user, and the token is the page. The launcher is a \
        file only this user can read, in a folder of its own (in $XDG_RUNTIME_DIR, else $TMPDIR or /tmp), \
        removed when coordfs web ends. The page shows the event log live (filter by path glob, kind and actor; \
        pause), the presenters, held accesses and waiting requests (coordfs status), the open \
        conflicts with base, theirs and mine side by side, a three-way merge preview and a button \
        for each resolution coordfs resolve has, each document's kept versions as a timeline (view, \
        diff against now, restore), and charts of presenters' answer latency and events per second.

        It runs as the user who starts it and reaches the mount only as the CLI does: the daemon's \
        control socket, the event log (through the daemon for a user who may not read its files), \
        and reads through the mount, so the page can show or do no more than that user may. Every \
        request and the live connection need the token (compared in constant time); the live \
        connection must come from the page's own origin, and a change (resolve, restore) must carry \
        the token in a header no other site can set. It listens on 127.0.0.1 unless told otherwise.

        When the mount goes away (unmounted, or its daemon stopped or crashed), the page says so \
        ("mount gone", with the reason) and stops following it, and coordfs web exits with a \
        message on stderr and status 69; it does not wait for a new mount (run it again, or let \
        a service manager restart it).

        Exit status: 0 after Ctrl-C or SIGTERM; 69 when the path is not in a running coordfs mount, \
        or when the mount went away while serving; 1 when the address cannot be listened on.

        Examples:
          coordfs web /mnt/docs
          coordfs web /mnt/docs --open
          coordfs web /mnt/docs --listen 127.0.0.1:8765
        """
    )

    @Argument(help: ArgumentHelp("The mountpoint (or any path inside the mount).", valueName: "mountpoint"))
    var mountpoint: String

    @Option(help: ArgumentHelp("Where to listen: an IP address and a port (0: any free one).", valueName: "host:port"))
    var listen: String = "127.0.0.1:0"

    @Flag(help: "Start $BROWSER (or xdg-open) on the launcher file, which keeps the token off its command line.")
    var open = false

    func validate() throws {
        guard MetricsAddress(listen) != nil else {
            throw ValidationError("--listen expects HOST:PORT, an IP address (127.0.0.1, [::1]) or localhost and a port (0 to 65535)")
        }
    }

    func run() throws {
        let address = MetricsAddress(listen)!
        let path = exactArgument(mountpoint)
        let located: LocatedMount
        do { located = try locateMount(path) } catch {
            ControlCommandFailure(message: error.description, status: ControlExit.unavailable).exit()
        }
        guard let mountPoint = located.mountpoint, !located.stale else {
            ControlCommandFailure(message: "the mount of \(located.backing) is not running (mount it again first)", status: ControlExit.unavailable).exit()
        }
        let mount: CoordFSMount
        do { (mount, _) = try CoordFSMount.containing(mountPoint) } catch {
            ControlCommandFailure(message: "\(error)", status: ControlExit.unavailable).exit()
        }
        let assets: WebAssets
        do { assets = try WebAssets.load(executable: Self.executablePath()) } catch {
            throw CLIError("\(error)")
        }
        let watch = MountWatch()
        guard let watcher = DaemonWatcher(mountPoint: mountPoint, socket: located.state.controlSocket, watch: watch) else {
            ControlCommandFailure(message: "the mount at \(mountPoint.displayEscaped) is not running (mount it again first)", status: ControlExit.unavailable).exit()
        }
        watcher.start()
        let backend = WebBackend(
            mountPoint: mountPoint, mount: mount,
            openLog: { after, recent in try Self.openLog(located, after: after, recent: recent) },
            status: { try await Self.status(located) }, watch: watch)
        let token = WebToken.generate()
        // Each connection holds a descriptor: take the hard limit (other users' share of them is
        // bounded, docs/web.md "Security").
        ControlServer.raiseFileDescriptorLimit()
        let server = WebServer(backend: backend, token: token, host: address.host, port: Int(address.port), assets: assets)
        let shown = address.isIPv6 ? "[\(address.host)]" : address.host
        let open = self.open
        // The launcher file, removed on every way out.
        let launcher = Mutex<WebLauncher?>(nil)
        defer { launcher.withLock { $0?.remove() } }
        let gone: String?
        do {
            gone = try runBlocking {
                try await server.run { port in
                    let url = "http://\(shown):\(port)/?token=\(token.value)"
                    Stdout.line("coordfs web: \(mountPoint.displayEscaped) at")
                    Stdout.line("    \(url)")
                    // Without the launcher (or a browser for --open) the server goes on: the URL
                    // can still be pasted into a running browser. No browser is ever given the URL.
                    do {
                        let made = try WebLauncher(url: url)
                        launcher.withLock { $0 = made }
                        Stdout.line("open it in a browser from this file (only you can read it; a browser's command line is not private):")
                        Stdout.line("    \(made.url)")
                        if open { try made.openInBrowser() }
                    } catch {
                        Stderr.print("coordfs: web: \(error)" + (open ? "" : "; paste the URL into a running browser instead"))
                    }
                }
            }
        } catch {
            throw CLIError("cannot serve on \(address): \(error)")
        }
        if let gone {
            launcher.withLock { $0?.remove() }
            ControlCommandFailure(message: "web: the mount at \(mountPoint.displayEscaped) is gone (\(gone)); stopped serving", status: ControlExit.unavailable).exit()
        }
    }

    /// A reader of the log: the last `recent` records then live ones, or those after `after`.
    static func openLog(_ mount: LocatedMount, after: UInt64?, recent: Int) throws -> any WebRecordSource {
        let filter = EventFilter()
        if let after { return try mount.recordSource(position: .after(after), filter: filter) }
        let bounds = try mount.recordBounds()
        let start = max(bounds.oldestSeq ?? 1, bounds.nextSeq > UInt64(recent) ? bounds.nextSeq - UInt64(recent) : 1)
        return try mount.recordSource(position: .from(start), filter: filter)
    }

    /// `coordfs status --json`'s object, with the event log's state.
    static func status(_ mount: LocatedMount) async throws -> [UInt8] {
        let socket = mount.state.controlSocket
        let client = try ControlClient.connect(socketPath: socket, clientName: "coordfs web")
        defer { client.close() }
        let report = try await client.status()
        var object = StatusCommand.json(report, mountPoint: mount.mountpoint ?? mount.backing)
        if let state = EventLogWriterState.read(directory: StatusCommand.eventLogDirectory(socketPath: socket)) {
            object["eventLog"] = .object(StatusCommand.json(state))
        }
        return JSONWriter.write(.object(object))
    }

    static func executablePath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(nameCString: buffer) : CommandLine.arguments[0]
    }
}

/// Watches the mount `coordfs web` shows, on a thread of its own, and tells `MountWatch` when it
/// is gone: the mount table no longer lists this mount (unmounted; a new mount at the same place
/// is another mount), or its daemon's control socket closed and cannot be connected again (the
/// daemon stopped or crashed). One idle control connection is held; the daemon may drop it when
/// idle (`idle_timeout`), which a reconnect tells apart from a daemon that is gone.
///
/// Nothing is polled on a timer: the thread sleeps in poll(2) until the kernel says the mount
/// table changed (`POLLPRI` on `/proc/self/mountinfo`, proc(5)) or the connection closed (the
/// client's delegate writes to a pipe), so an idle `coordfs web` takes no CPU.
final class DaemonWatcher: ControlClientDelegate, @unchecked Sendable {
    let mountPoint: String
    let socket: String
    let watch: MountWatch
    /// The kernel's id of the mount (mountinfo's first field), so a remount is not taken for it.
    let mountID: Int
    private var client: ControlClient?
    /// A pipe's read end, readable once the connection closed, and its write end.
    private let closed: Int32
    private let closing: Int32
    /// Signals a change of this process's mount table.
    private let mountTable: Int32
    /// The watching thread's name (`/proc/PID/task/TID/comm`).
    static let threadName = "coordfs-watch"
    /// How long to wait before connecting again after a failed attempt (a busy daemon), in ms.
    static let retryInterval: Int32 = 1000

    init?(mountPoint: String, socket: String, watch: MountWatch) {
        guard let id = MountTable.coordfsMountID(at: mountPoint) else { return nil }
        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else { return nil }
        for fd in pipeFDs {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        let mountTable = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard mountTable >= 0 else {
            close(pipeFDs[0])
            close(pipeFDs[1])
            return nil
        }
        self.mountPoint = mountPoint
        self.socket = socket
        self.watch = watch
        self.mountID = id
        self.closed = pipeFDs[0]
        self.closing = pipeFDs[1]
        self.mountTable = mountTable
        client = try? ControlClient.connect(socketPath: socket, clientName: "coordfs web (watch)", delegate: self)
    }

    func start() {
        Thread.detachNewThread { [self] in
            nameCurrentThread(Self.threadName)
            while watch.goneReason == nil {
                if let reason = check() {
                    watch.markGone(reason)
                    break
                }
                waitForNews()
            }
            client?.close()
        }
    }

    /// Sleeps until the mount table changes or the connection closes (or, while there is no
    /// connection, until it is time to try again).
    private func waitForNews() {
        var fds = [pollfd(fd: mountTable, events: Int16(POLLPRI), revents: 0), pollfd(fd: closed, events: Int16(POLLIN), revents: 0)]
        let ready = poll(&fds, 2, client == nil ? Self.retryInterval : -1)
        if ready > 0 && fds[1].revents & Int16(POLLIN) != 0 {
            var drained = [UInt8](repeating: 0, count: 64)
            while read(closed, &drained, drained.count) > 0 {}
        }
    }

    /// Why the mount is gone, or nil while it is there.
    func check() -> String? {
        guard MountTable.coordfsMountID(at: mountPoint) == mountID else { return "it was unmounted" }
        if client?.isConnected == true { return nil }
        client = nil  // its reader closed the descriptor
        do {
            client = try ControlClient.connect(socketPath: socket, clientName: "coordfs web (watch)", delegate: self, timeout: .seconds(2))
            return nil
        } catch {
            // Gone for good when nobody listens any more; other failures (a busy daemon) are retried.
            if case .system(_, let e) = error, e == ECONNREFUSED || e == ENOENT { return "its daemon stopped" }
            return nil
        }
    }

    // MARK: ControlClientDelegate

    var receivesOnReaderThread: Bool { true }
    func controlClient(_ client: ControlClient, didReceive ask: Ask) {}
    func controlClient(_ client: ControlClient, didReceive notification: PresenterNotification) {}
    func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?) {
        var one: UInt8 = 1
        _ = write(closing, &one, 1)
    }
}
