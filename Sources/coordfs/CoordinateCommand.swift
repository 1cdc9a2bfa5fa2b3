import ArgumentParser
import ControlProtocol
import Glibc
import Linux

/// `coordfs coordinate`: runs a command inside a coordinated access, as flock(1) does for a lock.
struct CoordinateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coordinate",
        abstract: "Run a command inside a coordinated read or write of an item.",
        discussion: """
        Asks the mount's daemon for a coordinated access to PATH (presenters are asked first, as \
        for any coordinated access: relinquish, save, accommodate deletion), waits until it is \
        granted, then runs COMMAND and exits with its exit status. The access is held until \
        COMMAND exits; other processes' conflicting accesses, through the mount or the control \
        socket, wait until then.

        COMMAND runs in place of this process (same pid), so its own reads and writes through the \
        mount never wait for the access it runs in, nor do those of the processes it starts (a \
        script's cp, sed or redirection): a process never waits for the processes that started \
        it. Their own explicit coordinated accesses (another coordfs coordinate) are coordinated \
        like anyone else's. The connection to the daemon is passed to COMMAND as \
        an open descriptor ($COORDFS_ACCESS_FD); the access ends when the last process holding it \
        exits (as with flock(1)), and presenters hear what COMMAND did through the mount.

        Exit status: COMMAND's; 64 usage; 66 the item's directory does not exist or the path \
        leaves the mount; 69 not a coordfs mount or no daemon; 75 not granted within --timeout, \
        or refused at once by a per-user limit of the mount (max_user_accesses: try again later); \
        77 permission denied; 1 a presenter refused; 126/127 COMMAND cannot be run.

        Examples:
          coordfs coordinate --read /mnt/docs/report.txt -- cp /mnt/docs/report.txt /backup/
          coordfs coordinate --write /mnt/docs/report.txt -- sed -i s/draft/final/ /mnt/docs/report.txt
          coordfs coordinate --write --for-deleting /mnt/docs/old -- rm -r /mnt/docs/old
          coordfs coordinate --write --timeout 5 /mnt/docs/db.json -- ./update.sh
        """
    )

    @Flag(help: "A coordinated read (presenters relinquish and save first).")
    var read = false
    @Flag(help: "A coordinated write (presenters relinquish; others wait).")
    var write = false
    @Flag(help: "Read without asking presenters to save first (with --read).")
    var withoutChanges = false
    @Flag(help: "The write deletes the item (presenters accommodate the deletion).")
    var forDeleting = false
    @Flag(help: "The write moves the item.")
    var forMoving = false
    @Flag(help: "The write replaces the item (presenters accommodate the deletion).")
    var forReplacing = false
    @Flag(help: "The write merges with the current contents (presenters save first).")
    var forMerging = false
    @Option(help: ArgumentHelp("Longest wait for the grant, in seconds (at most 3600).", valueName: "seconds"))
    var timeout: Double = 60
    @Flag(name: .shortAndLong, help: "Say nothing when the access is granted or refused (the exit status tells).")
    var quiet = false

    @Argument(help: ArgumentHelp("The item to coordinate (inside a coordfs mount).", valueName: "path"))
    var path: String

    @Argument(parsing: .postTerminator, help: ArgumentHelp("The command to run, after --.", valueName: "command"))
    var command: [String] = []

    func validate() throws {
        if read == write { throw ValidationError("give exactly one of --read and --write") }
        if read && (forDeleting || forMoving || forReplacing || forMerging) {
            throw ValidationError("--for-deleting, --for-moving, --for-replacing and --for-merging go with --write")
        }
        if write && withoutChanges { throw ValidationError("--without-changes goes with --read") }
        if command.isEmpty { throw ValidationError("no command given: coordfs coordinate ... PATH -- COMMAND [ARGS...]") }
        if !(timeout > 0) || timeout > 3600 { throw ValidationError("--timeout expects seconds between 0 and 3600") }
    }

    /// The intent for PATH, relative to its mount.
    func intent(at path: MountPath) -> Intent {
        if write {
            var options: WritingOptions = []
            if forDeleting { options.insert(.forDeleting) }
            if forMoving { options.insert(.forMoving) }
            if forReplacing { options.insert(.forReplacing) }
            if forMerging { options.insert(.forMerging) }
            return .writing(path, options: options)
        }
        return .reading(path, options: withoutChanges ? .withoutChanges : [])
    }

    func run() throws {
        let location: ControlSocketLocator.Location
        let intent: Intent
        do { location = try locateControlSocket(path) } catch { error.exit() }
        intent = self.intent(at: location.relativePath)
        let fd: Int32
        let access: AccessID
        do {
            fd = try BlockingControlConnection.connect(location.socketPath)
            access = try BlockingControlConnection.coordinate(fd, intent, timeoutMs: UInt32(timeout * 1000))
        } catch {
            if quiet { Glibc.exit(error.status) }
            error.exit()
        }
        if !quiet && isatty(STDERR_FILENO) == 1 {
            Stderr.print("coordfs: \(StatusCommand.describe(intent)) granted (\(access)); running \(command[0])")
        }
        // The connection stays open in COMMAND: the access lasts as long as the process does.
        _ = fcntl(fd, F_SETFD, 0)
        setenv("COORDFS_ACCESS_FD", String(fd), 1)
        setenv("COORDFS_ACCESS", String(access.rawValue), 1)
        let argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        execvp(command[0], argv)
        let code = errno
        Stderr.print("coordfs: cannot run \(command[0]): \(String(cString: strerror(code)))")
        Glibc.exit(code == ENOENT ? 127 : 126)
    }
}

/// The few synchronous control-socket exchanges `coordinate` needs before it becomes COMMAND
/// (no threads, no Swift concurrency: the descriptor must survive `exec`).
enum BlockingControlConnection {
    /// Connects and says hello; the descriptor is close-on-exec until the caller clears it.
    static func connect(_ socketPath: String) throws(ControlCommandFailure) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw failure("socket: \(String(cString: strerror(errno)))", ControlExit.unavailable) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var target = socketPath
        var directoryFD: Int32 = -1
        defer { if directoryFD >= 0 { close(directoryFD) } }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        if target.utf8.count >= capacity, let slash = target.lastIndex(of: "/") {
            // Too long for sun_path: reach it through the directory's descriptor.
            directoryFD = open(String(target[..<slash]), 0o10000000 /* O_PATH */ | O_DIRECTORY | O_CLOEXEC)
            target = "/proc/self/fd/\(directoryFD)/" + target[target.index(after: slash)...]
        }
        guard target.utf8.count < capacity else { throw failure("socket path too long: \(socketPath)", ControlExit.unavailable) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: target.utf8)
            raw[target.utf8.count] = 0
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let code = errno
            close(fd)
            throw failure("cannot reach the daemon at \(socketPath): \(String(cString: strerror(code)))", ControlExit.unavailable)
        }
        try send(fd, .hello(Hello(id: RequestID(1), client: "coordfs coordinate")))
        var decoder = FrameDecoder()
        guard case .welcome = try receive(fd, &decoder) else { throw failure("the daemon did not say welcome", ControlExit.unavailable) }
        return fd
    }

    /// Asks for the access and waits for the grant.
    static func coordinate(_ fd: Int32, _ intent: Intent, timeoutMs: UInt32) throws(ControlCommandFailure) -> AccessID {
        try send(fd, .coordinate(Coordinate(id: RequestID(2), intents: [intent], timeoutMs: timeoutMs)))
        var decoder = FrameDecoder()
        while true {
            switch try receive(fd, &decoder) {
            case .granted(let granted): return granted.access
            case .error(let error):
                throw failure("\(StatusCommand.describe(intent)) refused: \(error.message) (\(error.code))", ControlExit.status(for: error.code))
            default: continue  // nothing else is addressed to a client that presents nothing
            }
        }
    }

    private static func send(_ fd: Int32, _ message: ControlMessage) throws(ControlCommandFailure) {
        let frame = message.encodedFrame()
        var offset = 0
        while offset < frame.count {
            let n = retryingEINTR { frame.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) } }
            guard n > 0 else { throw failure("the daemon closed the connection", ControlExit.unavailable) }
            offset += n
        }
    }

    private static func receive(_ fd: Int32, _ decoder: inout FrameDecoder) throws(ControlCommandFailure) -> ControlMessage {
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            do {
                if let payload = try decoder.nextFrame() { return try ControlMessage.decode(payload: payload) }
            } catch {
                throw failure("bad reply from the daemon: \(error)", ControlExit.unavailable)
            }
            let n = retryingEINTR { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
            guard n > 0 else { throw failure("the daemon closed the connection", ControlExit.unavailable) }
            decoder.append(buffer[0..<n])
        }
    }

    private static func failure(_ message: String, _ status: Int32) -> ControlCommandFailure {
        ControlCommandFailure(message: message, status: status)
    }
}
