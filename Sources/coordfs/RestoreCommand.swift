import NameBytes
import ArgumentParser
import DocumentStore
import Foundation
import Glibc

/// `coordfs restore PATH --version N`: writes a kept version back, through the mount.
struct RestoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Write a kept version of a document back over it (undoable).",
        discussion: """
        Keeps the current file as a new version first (so the restore can itself be undone with \
        another restore), then writes version N through the mount: to a temporary name beside \
        the document, then renamed over it. That is a coordinated write like any editor's save: \
        the document's presenters are asked first and told after, and the mount must be running. \
        A deleted document is re-created.

        Example:
          coordfs restore /mnt/docs/report.txt --version 12
        """
    )

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Option(help: ArgumentHelp("The version number (from `coordfs versions`).", valueName: "n"))
    var version: Int64

    func run() throws {
        let location = try StoreLocation(path)
        guard let target = location.mountPath, !location.mount.stale else {
            throw CLIError("the mount of \(location.mount.backing) is not running: a restore is a coordinated write; mount it again first")
        }
        // Unpresented files are kept too (by link: the file is replaced below, never written in place).
        let store = try location.openStore(unpresentedFiles: .whenCheap)
        let kept = try location.version(version, in: store)
        let source = try storeCall { try store.storedFile(of: kept.id) }
        let current = try storeCall { try store.preserveBeforeReplace(location.relative) }

        var st = stat()
        let mode: mode_t = target.withNameCString({ lstat($0, &st) }) == 0 ? st.st_mode & 0o7777 : 0o644
        let slash = target.utf8.lastIndex(of: UInt8(ascii: "/"))!
        let name = target[target.index(after: slash)...]
        // A temp name (*.tmp) the mount does not report as a new document.
        let temporary = String(target[..<slash]) + "/.\(name).coordfs-restore-\(getpid()).tmp"
        do {
            try copy(source, to: temporary, mode: mode)
            guard temporary.withNameCString({ a in target.withNameCString { b in rename(a, b) } }) == 0 else { throw CLIError("cannot rename over \(target): \(String(cString: strerror(errno)))") }
        } catch {
            _ = temporary.withNameCString { unlink($0) }
            throw error
        }
        var message = "restored \(target) to version \(kept.id)"
        if let current { message += "; the file it replaced is version \(current.version.id) (coordfs restore \(path) --version \(current.version.id) undoes this)" }
        print(message.displayEscaped)
    }

    /// Copies `source` to a new file `destination` (through the mount) and syncs it.
    private func copy(_ source: String, to destination: String, mode: mode_t) throws {
        let input = source.withNameCString { open($0, O_RDONLY | O_CLOEXEC) }
        guard input >= 0 else { throw CLIError("cannot read version \(version): \(String(cString: strerror(errno)))") }
        defer { close(input) }
        let output = destination.withNameCString { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
        guard output >= 0 else { throw CLIError("cannot create \(destination): \(String(cString: strerror(errno)))") }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = read(input, &buffer, buffer.count)
            if n < 0 { if errno == EINTR { continue }; throw CLIError("reading version \(version): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            var offset = 0
            while offset < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, n - offset) }
                if w < 0 { if errno == EINTR { continue }; throw CLIError("writing \(destination): \(String(cString: strerror(errno)))") }
                offset += w
            }
        }
        _ = fchmod(output, mode) // exact mode, whatever the umask
        guard fsync(output) == 0 else { throw CLIError("fsync \(destination): \(String(cString: strerror(errno)))") }
    }
}
