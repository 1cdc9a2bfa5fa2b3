import NameBytes
import ArgumentParser
import CoordFS
import Glibc
import Linux

struct MountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount BACKING on MOUNTPOINT.",
        discussion: """
        Without -f the daemon goes to the background and the command returns once the mount answers. \
        Its log is BACKING/.coordfs/daemon.log. SIGINT, SIGTERM or `coordfs unmount` unmount cleanly; \
        after a signal what is still open in the mount is served until it is let go (a second \
        signal ends it at once). \
        A stale mount left by a crashed daemon on MOUNTPOINT is cleaned up first. Refused when \
        BACKING/.coordfs is not the mounting user's own folder or others may write it. The daemon \
        holds its state folder open and keeps using it even if another user moves it away (where \
        BACKING is theirs, or others may write it without the sticky bit: the mount says so), and \
        coordfs commands refuse a .coordfs that is not the mount's daemon's. With allow_other it \
        warns when other users cannot reach its control socket (BACKING, or a folder above it, is \
        not searchable by them): their coordfs commands would fail.

        A node of a cluster (-o cluster=URL,...) keeps its state (log, store, socket, daemon log) in \
        BACKING/.coordfs/nodes/NODE (NODE: node=, by default the host name), so several hosts can \
        mount one shared folder (NFS, SMB, CephFS). On network storage the backing watcher sees no \
        other host's writes: backing_watcher=off turns it off; the cluster tells nodes of each \
        other's changes (docs/cluster.md).

        Options (-o, comma-separated, repeatable):
        \(MountOptions.documentation)

        With allow_other or allow_root (or when given), default_permissions is on: the kernel checks \
        every caller's permissions as the backing folder would. Without them only the mounting user \
        can use the mount, and the daemon acts as that user, so the backing folder's checks are the \
        native ones.
        """
    )

    @Argument(help: "The folder to share.") var backing: String
    @Argument(help: "Where to mount it.") var mountpoint: String
    @Option(name: .customShort("o"), help: "Mount options, comma-separated.") var options: [String] = []
    @Flag(name: [.customShort("f"), .long], help: "Stay in the foreground.") var foreground = false
    /// Set by `coordfs mount` (background) for the daemon it starts: where to say "ok" or why not.
    @Option(name: .customLong("ready-fd"), help: .private) var readyFD: Int32?

    func run() throws {
        // The background daemon (started by `coordfs mount` with --ready-fd) drops what it
        // inherited from its starter. `coordfs mount -f` is its caller's own child, as any
        // foreground program, and leaves what it inherited alone: Foundation's `Process` learns of
        // a child's exit from a socket the child inherits, so closing it made a Swift supervisor
        // wait (in waitpid) for the mount to end before it saw any other child exit.
        if readyFD != nil {
            DaemonLauncher.closeInheritedDescriptors(keeping: readyFD)
            DaemonLauncher.detach()
        }
        // Names inside the mount are any bytes; the two folders' own paths must be UTF-8.
        for (role, given) in [("backing folder", backing), ("mountpoint", mountpoint)] where !LosslessName.isPlain(exactArgument(given)) {
            throw CLIError("the \(role)'s path \(exactArgument(given)) is not UTF-8: coordfs mounts only folders whose own paths are UTF-8 (the names inside may be any bytes)")
        }
        do {
            let opts = try MountOptions.parse(options)
            let plan = try MountPreflight.plan(backing: backing, mountpoint: mountpoint, options: opts)
            // Said once, by the command the user ran (not again by the daemon it starts).
            if readyFD == nil, let (folder, mode) = MountPreflight.socketOutOfOtherUsersReach(plan) {
                sayOnStandardError("coordfs: warning: other users may use the mount (allow_other), but not its control socket: '\(folder)' (mode \(String(mode, radix: 8))) is not searchable by them, so their coordfs commands (present, coordinate, status, log, watch, web, conflicts, resolve) fail with 'Permission denied'; chmod o+x '\(folder)' lets them reach it (without listing it)")
            }
            if foreground {
                let daemon = try Daemon(plan: plan)
                DaemonLauncher.end(try DaemonLauncher.runInForeground(daemon, readyFD: readyFD))
            } else {
                try DaemonLauncher.startInBackground(plan, options: options)
            }
        } catch let e as MountError {
            if let readyFD { DaemonLauncher.tell(readyFD, e.description) }
            throw CLIError(e.description)
        }
    }
}

struct UnmountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a coordfs mount and wait for its daemon to finish.",
        discussion: "A mount with a file open or a working directory inside is busy: refused (exit 1) once it stays so for half a second, and left mounted. --lazy detaches it at once.",
        aliases: ["umount"]
    )

    @Argument(help: "The mountpoint.") var mountpoint: String
    @Flag(name: .shortAndLong, help: "Detach now even if files are open (the daemon ends when they close).") var lazy = false

    func run() throws {
        do {
            try Unmounter.unmount(mountpoint, lazy: lazy)
        } catch let e as MountError {
            throw CLIError(e.description)
        }
    }
}

/// An error for the user: printed as "coordfs: message", exit status 1.
/// An error for people: names in it are shown escaped (`displayEscapedLines`), so a hostile name
/// cannot drive the terminal or forge output.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d.displayEscapedLines }
}
