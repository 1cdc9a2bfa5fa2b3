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

/// The first `limit` bytes of the regular file at `path`, nil for anything else: a link (not
/// followed), a FIFO (never waited on), a device (`/dev/zero` is not read on and on), or no file. For
/// the small records the CLI reads in a state folder before it has checked whose the folder is.
public func readSmallRegularFile(_ path: String, limit: Int) -> [UInt8]? {
    let fd = path.withNameCString { Glibc.open($0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
    guard fd >= 0 else { return nil }
    defer { Glibc.close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
    var bytes = [UInt8](repeating: 0, count: limit)
    let n = bytes.withUnsafeMutableBytes { b in retryingEINTR { pread(fd, b.baseAddress, b.count, 0) } }
    return n >= 0 ? Array(bytes[0..<n]) : nil
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
