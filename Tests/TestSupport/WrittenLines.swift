import Glibc

/// The lines a child process has written to a file so far. While the process may still write, a
/// last line without its newline is left out: a reader of a file being written can see half a line
/// ("conn" of "conn 2 error limitExceeded"), which a test would take for a whole one.
/// - Parameters:
///   - pid: the writer; read whether it ended before its output, so that an ended writer's last
///     line without a newline counts.
///   - read: the file's text as it is now.
public func writtenLines(of pid: pid_t, _ read: () -> String) -> [String] {
    let ended = ProcessEnd.hasEnded(pid)
    var text = read()
    if !ended, let lastNewline = text.lastIndex(of: "\n") {
        text = String(text[...lastNewline])
    } else if !ended {
        text = ""
    }
    return text.split(separator: "\n").map(String.init)
}
