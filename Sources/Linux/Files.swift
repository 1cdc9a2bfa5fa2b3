import Glibc
import NameBytes

/// One line on the daemon's stderr: `daemon.log` in the background, the terminal or the journal with
/// `-f`. A single write(2), so lines from several threads do not interleave.
public func sayOnStandardError(_ line: String) {
    // Names in messages are shown escaped (`displayEscapedLines`): a name cannot forge daemon.log.
    let shown = line.displayEscapedLines
    let text = shown.hasSuffix("\n") ? shown : shown + "\n"
    _ = text.withCString { Glibc.write(2, $0, strlen($0)) }
}

/// Reads a whole (small) file, or nil; the text as UTF-8 (bytes that are not become U+FFFD: for
/// files of text, such as /proc's; `readWholeFileBytes` for names).
public func readWholeFile(_ path: String) -> String? {
    readWholeFileBytes(path).map { String(decoding: $0, as: UTF8.self) }
}

/// Reads a whole (small) file's bytes, or nil. `path` is a lossless name (`LosslessName`).
public func readWholeFileBytes(_ path: String) -> [UInt8]? {
    let fd = path.withNameCString { Glibc.open($0, O_RDONLY | O_CLOEXEC) }
    guard fd >= 0 else { return nil }
    defer { Glibc.close(fd) }
    var data: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = retryingEINTR { Glibc.read(fd, &chunk, chunk.count) }
        if n < 0 { return nil }
        if n == 0 { break }
        data.append(contentsOf: chunk[0..<n])
    }
    return data
}
