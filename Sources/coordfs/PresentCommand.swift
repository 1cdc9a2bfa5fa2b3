import NameBytes
import ArgumentParser
import ControlProtocol
import CoordFSClient
import Dispatch
import Glibc
import Synchronization
import Linux

/// `coordfs present PATH`: a presenter from the shell.
struct PresentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "present",
        abstract: "Present a file or directory from the shell: print and answer every ask.",
        discussion: """
        Registers a presenter for PATH with the mount's daemon, as an editor holding the document \
        open would, and prints each ask (relinquish, save, accommodate deletion, reacquire) and \
        each notification (did change, did move, subitem events) as it arrives, one line each. \
        Every ask is answered: at once by default, after --delay seconds to play a slow \
        presenter, after --on-save's command for saves. A failing --on-save command (non-zero \
        exit) answers the save with an error, which refuses the access that asked.

        The mount's document store keeps the version the presenter loaded. When someone else \
        changes or deletes the file, the presenter gets one documentChanged notification with \
        what the store did: reload (nothing unsaved), close (deleted, nothing unsaved) or a \
        conflict. With --unsaved the presenter says it has unsaved changes, so a change \
        underneath it opens a conflict (list it with `coordfs conflicts`, resolve it with \
        `coordfs resolve`).

        Commands run with /bin/sh -c and these variables: COORDFS_PATH (the presented item's \
        absolute path, after any move), COORDFS_ITEM (the same, relative to the mount), \
        COORDFS_MOUNT, COORDFS_ASK or COORDFS_EVENT, COORDFS_SUBITEM and COORDFS_NEW_PATH \
        (absolute) when the message names them; for documentChanged also COORDFS_KIND (change, \
        deletion), COORDFS_ACTION (reload, close, conflict) and COORDFS_CONFLICT (its id). \
        --on-change runs for every notification. A \
        command that writes the presented file through the mount while answering would wait for \
        the very access that asked; write elsewhere, or to the backing folder.

        Runs until Ctrl-C, SIGTERM or SIGHUP (status 0), or quietly when the reader of its \
        output goes away. When the mount goes away (unmounted, or its daemon stopped or \
        restarted) it says so at once (a `disconnected` line, and a message on stderr) and waits: \
        once the mount is back at the same place it registers again (a new `registered` line) \
        and goes on; with --unsaved, an open conflict it had is its own again (a didGainConflict \
        notification), also one opened because the file changed while its daemon was down \
        (killed, or ended cleanly); without it, such a change is told at once, as a running \
        daemon tells it (documentChanged with action reload, or close for a deletion, then \
        didChange or didDelete). With --exit-when-gone it exits instead, with status 69, as soon as the mount goes away.

        Output lines (text):
          registered presenter#17 file report.txt
          disconnected report.txt
          ask ask#3 relinquishToWriter report.txt deadline=5000ms
          answered ask#3
          notification didChange report.txt
          notification didMove report.txt newPath=final.txt
          notification documentChanged report.txt kind=change action=conflict conflict=5 document=3

        With --json each line is the protocol message itself (docs/protocol.md).

        Examples:
          coordfs present /mnt/docs/report.txt
          coordfs present /mnt/docs --on-change 'echo "$COORDFS_EVENT $COORDFS_SUBITEM" >> /tmp/changes'
          coordfs present /mnt/docs/report.txt --delay 2
          coordfs present /mnt/docs/report.txt --unsaved
          coordfs present /mnt/docs/report.txt --on-save 'cp ~/draft.txt /srv/backing/report.txt'
        """
    )

    @Argument(help: ArgumentHelp("The file or directory to present (inside a coordfs mount).", valueName: "path"))
    var path: String

    @Option(name: .customLong("on-save"), help: ArgumentHelp("Run this shell command for each save ask; its failure refuses the save.", valueName: "command"))
    var onSave: String?

    @Option(name: .customLong("on-change"), help: ArgumentHelp("Run this shell command after each notification.", valueName: "command"))
    var onChange: String?

    @Option(help: ArgumentHelp("Wait this long before answering each ask.", valueName: "seconds"))
    var delay: Double = 0

    @Option(name: .customLong("ask"), help: ArgumentHelp("Only receive these asks (repeatable; default: all).", valueName: "ask"))
    var asks: [String] = []

    @Flag(help: "Present PATH as a directory even if nothing is there yet.")
    var directory = false

    @Flag(help: "Say the presenter has unsaved changes: a change underneath it opens a conflict instead of a reload.")
    var unsaved = false

    @Flag(help: "Print the protocol messages as JSON lines.")
    var json = false

    @Flag(name: .customLong("exit-when-gone"), help: "Exit with status 69 as soon as the mount goes away, instead of waiting for it to come back.")
    var exitWhenGone = false

    func validate() throws {
        if !(delay >= 0) || delay > 3600 { throw ValidationError("--delay expects seconds between 0 and 3600") }
        for ask in asks where AskKind(rawValue: ask) == nil {
            throw ValidationError("unknown ask '\(ask)'; asks: \(AskKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    func run() throws {
        // Signals are taken by this thread with sigwait; every thread started from now on
        // inherits the mask. SIGPIPE is blocked too: a gone reader shows up as EPIPE.
        var signals = sigset_t()
        sigemptyset(&signals)
        for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, s) }
        var blocked = signals
        sigaddset(&blocked, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &blocked, nil)

        let mount: CoordFSMount
        let relative: MountPath
        // Says where a backing folder renamed while mounted is now, or why it cannot be found.
        do { _ = try locateControlSocket(path) } catch { error.exit() }
        do {
            (mount, relative) = try CoordFSMount.containing(exactArgument(path))
        } catch {
            ControlCommandFailure(message: error.description, status: ControlExit.unavailable).exit()
        }
        var isDirectory = directory
        var st = stat()
        if mount.absolutePath(relative).withNameCString({ stat($0, &st) }) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { isDirectory = true }
        let kind: ItemKind = isDirectory ? .directory : .file
        let wanted = asks.isEmpty ? Set(AskKind.allCases) : Set(asks.compactMap(AskKind.init(rawValue:)))
        let endpoint = ShellPresenter(mount: mount, path: relative, kind: kind, json: json, delay: delay, onSave: onSave, onChange: onChange,
                                      exitWhenGone: exitWhenGone, unsaved: unsaved)
        let session = mount.session
        do {
            let unsaved = self.unsaved
            let handle = try runBlocking { try await session.register(relative, kind: kind, asks: wanted, unsaved: unsaved, endpoint: endpoint) }
            endpoint.registered(as: session.remoteID(of: handle))
        } catch {
            let code = (error as? ControlTransportError).flatMap { e -> ErrorCode? in
                if case .protocolError(let p) = e { return p.code }
                return nil
            }
            ControlCommandFailure(message: "cannot present \(path): \(error)",
                                  status: code.map(ControlExit.status(for:)) ?? ControlExit.unavailable).exit()
        }
        if isatty(STDERR_FILENO) == 1 { Stderr.print("coordfs: presenting \(mount.absolutePath(relative)); Ctrl-C to stop") }
        var caught: Int32 = 0
        while sigwait(&signals, &caught) != 0 {}
        // Closing the connection unregisters the presenter at once; asks pending on it end.
        session.close()
    }
}

/// The presenter behind `coordfs present`: prints, waits, runs the user's commands, answers.
final class ShellPresenter: PresenterEndpoint, Sendable {
    let mount: CoordFSMount
    let json: Bool
    let delay: Double
    let onSave: String?
    let onChange: String?
    let kind: ItemKind
    let exitWhenGone: Bool
    /// Registered with unsaved changes (`--unsaved`): the session registers it so again after a
    /// remount, and each `registered` line says so.
    let unsaved: Bool
    private let current: Mutex<MountPath>

    init(mount: CoordFSMount, path: MountPath, kind: ItemKind, json: Bool, delay: Double, onSave: String?, onChange: String?,
         exitWhenGone: Bool, unsaved: Bool = false) {
        self.mount = mount
        self.current = Mutex(path)
        self.kind = kind
        self.json = json
        self.delay = delay
        self.onSave = onSave
        self.onChange = onChange
        self.exitWhenGone = exitWhenGone
        self.unsaved = unsaved
    }

    /// The `registered` line, at the start and after each re-registration.
    func registered(as presenter: PresenterID?) {
        let path = current.withLock { $0 }
        if json {
            var object = JSONObject()
            object["type"] = .string("registered")
            object["presenter"] = .int(Int64(presenter?.rawValue ?? 0))
            object["kind"] = .string(kind.rawValue)
            object["path"] = .string(path.wireValue)
            if unsaved { object["unsaved"] = .bool(true) }
            output(object: object)
        } else {
            let id = presenter.map(String.init(describing:)) ?? "presenter"
            output(line: "registered \(id) \(kind.rawValue) \(path.description.displayEscaped)" + (unsaved ? " unsaved" : ""))
        }
    }

    func connectionLost(_ error: ControlTransportError?) async {
        let path = current.withLock { $0 }
        if json {
            var object = JSONObject()
            object["type"] = .string("disconnected")
            object["path"] = .string(path.wireValue)
            output(object: object)
        } else {
            output(line: "disconnected \(path.description.displayEscaped)")
        }
        if exitWhenGone {
            Stderr.print("coordfs: the mount at \(mount.mountPoint) went away (unmounted, or its daemon stopped)")
            exit(ControlExit.unavailable)
        }
        Stderr.print("coordfs: the mount at \(mount.mountPoint) went away (unmounted, or its daemon stopped); waiting for it to come back")
    }

    func registeredAgain(as presenter: PresenterID) async {
        registered(as: presenter)
    }

    func perform(_ ask: Ask) async -> ErrorBody? {
        if json {
            output(object: ControlMessage.ask(ask).jsonObject)
        } else {
            var line = "ask \(ask.id) \(ask.kind.rawValue) \(ask.path.description.displayEscaped)"
            if let subitem = ask.subitem { line += " subitem=\(subitem.description.displayEscaped)" }
            output(line: line + " deadline=\(ask.deadlineMs)ms")
        }
        if delay > 0 { try? await Task.sleep(for: .milliseconds(Int64(delay * 1000))) }
        var failure: ErrorBody?
        if ask.kind == .save, let onSave {
            var environment = variables(path: ask.path)
            environment["COORDFS_ASK"] = ask.kind.rawValue
            let status = await ShellCommand.run(onSave, environment: environment)
            if status != 0 { failure = ErrorBody(code: .failed, message: "--on-save command exited with status \(status)") }
        }
        if json {
            var object = JSONObject()
            object["type"] = .string("answer")
            object["id"] = .int(Int64(ask.id.rawValue))
            if let failure { object["error"] = .object(JSONObject(["code": .string(failure.code.rawValue), "message": .string(failure.message)])) }
            output(object: object)
        } else {
            output(line: failure.map { "failed \(ask.id): \($0.message.displayEscaped)" } ?? "answered \(ask.id)")
        }
        return failure
    }

    func receive(_ event: PresenterEvent) async {
        if case .didMove(let newPath) = event { current.withLock { $0 = newPath } }
        let path = current.withLock { $0 }
        var subitem: MountPath?
        var newPath: MountPath?
        var document: DocumentChange?
        switch event {
        case .didMove(let to): newPath = to
        case .subitemDidAppear(let p), .subitemDidChange(let p), .subitemDidDelete(let p): subitem = p
        case .subitemDidMove(let from, let to): subitem = from; newPath = to
        case .documentChanged(let change): document = change
        default: break
        }
        if json {
            output(object: ControlMessage.notification(PresenterNotification(presenter: PresenterID(0), event: event)).jsonObject.removing("presenter"))
        } else {
            var line = "notification \(event.name) \(path.description.displayEscaped)"
            if let subitem { line += " subitem=\(subitem.description.displayEscaped)" }
            if let newPath { line += " newPath=\(newPath.description.displayEscaped)" }
            if let document {
                line += " kind=\(document.kind.rawValue) action=\(document.action.name)"
                if case .conflict(let id) = document.action { line += " conflict=\(id.rawValue)" }
                if case .failed(let message) = document.action { line += " message=\(message)" }
                line += " document=\(document.document.rawValue)"
            }
            if case .didGainConflict(let conflict) = event { line += " conflict=\(conflict.rawValue)" }
            if case .didResolveConflict(let conflict, let resolution) = event { line += " conflict=\(conflict.rawValue) resolution=\(resolution.rawValue)" }
            output(line: line)
        }
        if let onChange {
            var environment = variables(path: path)
            environment["COORDFS_EVENT"] = event.name
            if let subitem { environment["COORDFS_SUBITEM"] = mount.absolutePath(subitem) }
            if let newPath { environment["COORDFS_NEW_PATH"] = mount.absolutePath(newPath) }
            if let document {
                environment["COORDFS_KIND"] = document.kind.rawValue
                environment["COORDFS_ACTION"] = document.action.name
                if case .conflict(let id) = document.action { environment["COORDFS_CONFLICT"] = String(id.rawValue) }
            }
            _ = await ShellCommand.run(onChange, environment: environment)
        }
    }

    func registrationLost(_ error: ControlTransportError) async {
        Stderr.print("coordfs: the presenter could not be registered again after the daemon restarted: \(error)")
        kill(getpid(), SIGTERM)
    }

    private func variables(path: MountPath) -> [String: String] {
        ["COORDFS_PATH": mount.absolutePath(path), "COORDFS_ITEM": path.wireValue, "COORDFS_MOUNT": mount.mountPoint]
    }

    func output(line: String) {
        // A reader that went away ends the presenter quietly (SIGTERM to the signal-waiting thread).
        if !Stdout.line(line) { kill(getpid(), SIGTERM) }
    }

    func output(object: JSONObject) {
        output(line: String(decoding: JSONWriter.write(.object(object)), as: UTF8.self))
    }
}

extension JSONObject {
    func removing(_ key: String) -> JSONObject {
        var copy = self
        copy[key] = nil
        return copy
    }
}

/// Runs `/bin/sh -c COMMAND` with extra environment variables and waits for it without holding a
/// Swift concurrency thread.
enum ShellCommand {
    static func run(_ command: String, environment extra: [String: String]) async -> Int32 {
        var env: [String] = []
        var index = 0
        while let entry = environ[index] {
            let text = String(nameCString: entry)
            if extra[String(text.prefix { $0 != "=" })] == nil { env.append(text) }
            index += 1
        }
        for (key, value) in extra { env.append("\(key)=\(value)") }
        let words: [String] = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        // Paths in the variables are the names' bytes (`LosslessName`), not their lossless strings.
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { $0.withNameCString { strdup($0) } } + [nil]
        defer { argv.forEach { free($0) }; envp.forEach { free($0) } }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The child gets the default signal mask (this process blocks INT/TERM/HUP/PIPE for sigwait).
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/sh", nil, &attributes, argv, envp)
        guard rc == 0 else {
            Stderr.print("coordfs: cannot run /bin/sh: \(String(cString: strerror(rc)))")
            return 127
        }
        let child = pid
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var status: Int32 = 0
                _ = retryingEINTR { waitpid(child, &status, 0) }
                let signal = status & 0x7f
                continuation.resume(returning: signal == 0 ? (status >> 8) & 0xff : 128 + signal)
            }
        }
    }
}
