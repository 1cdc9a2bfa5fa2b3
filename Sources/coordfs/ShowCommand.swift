import NameBytes
import ArgumentParser
import DocumentStore
import Glibc
import Linux

/// `coordfs show PATH --version N`: a kept version's bytes on stdout.
struct ShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print a kept version of a document.",
        discussion: """
        Writes the bytes of version N of PATH (see `coordfs versions PATH`) to standard output, \
        unchanged (binary files too).

        Example:
          coordfs show /mnt/docs/report.txt --version 12 > report-v12.txt
        """
    )

    @Argument(help: ArgumentHelp("A document inside a coordfs mount.", valueName: "path"))
    var path: String

    @Option(help: ArgumentHelp("The version number (from `coordfs versions`).", valueName: "n"))
    var version: Int64

    func run() throws {
        let location = try StoreLocation(path)
        if location.throughDaemon {
            let bytes = try location.contentsThroughDaemon(ofVersion: version)
            var offset = 0
            while offset < bytes.count {
                let w = retryingEINTR { bytes.withUnsafeBytes { write(1, $0.baseAddress! + offset, bytes.count - offset) } }
                if w < 0 {
                    if errno == EPIPE { return } // the reader went away (| head)
                    throw CLIError("writing: \(String(cString: strerror(errno)))")
                }
                offset += w
            }
            return
        }
        let store = try location.openStore()
        let kept = try location.version(version, in: store)
        let file = try storeCall { try store.storedFile(of: kept.id) }
        // Streamed: a version can be large.
        let fd = file.withNameCString { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { throw CLIError("cannot read version \(version): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = retryingEINTR { read(fd, &buffer, buffer.count) }
            if n < 0 { throw CLIError("reading version \(version): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            var offset = 0
            while offset < n {
                let w = retryingEINTR { buffer.withUnsafeBytes { write(1, $0.baseAddress! + offset, n - offset) } }
                if w < 0 {
                    if errno == EPIPE { return } // the reader went away (| head)
                    throw CLIError("writing: \(String(cString: strerror(errno)))")
                }
                offset += w
            }
        }
    }
}
