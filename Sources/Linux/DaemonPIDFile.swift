import Glibc

/// A daemon's pid file, `daemon.pid` in its state folder. The first line is the pid alone, as
/// `kill $(head -1 daemon.pid)`, `pkill -F`, systemd's `PIDFile=` and start-stop-daemon read it; the
/// second, `start=TICKS boot=ID`, says which process had that pid (`ProcessLife.startTime`, this
/// kernel's boot: `ProcessLife.bootID`). A daemon killed leaves its file; once the kernel hands its pid
/// out again, or the machine restarted (the file lives in the backing folder, not in /run), the file
/// names no running daemon. Nothing on the second line reads as a pid: `kill $(cat daemon.pid)` signals
/// the daemon and refuses the rest. A file of an older daemon (the pid alone) is judged by its pid.
public struct DaemonPIDFile: Equatable, Sendable {
    public var pid: pid_t
    /// The daemon's start time; nil in an older daemon's file.
    public var start: UInt64?
    /// The boot it was written in; nil in an older daemon's file.
    public var bootID: String?

    public init(pid: pid_t, start: UInt64? = nil, bootID: String? = nil) {
        self.pid = pid
        self.start = start
        self.bootID = bootID
    }

    /// The process it names runs (`ProcessLife.isRunning`): in this boot, with this start.
    public var isRunning: Bool {
        if let bootID, bootID != ProcessLife.bootID() { return false }
        return ProcessLife.isRunning(pid, startedAt: start)
    }

    /// The file's bytes for this process.
    public static func contents() -> [UInt8] {
        let me = getpid()
        var text = "\(me)\n"
        if let start = ProcessLife.startTime(me) {
            let boot = ProcessLife.bootID()
            text += "start=\(start)" + (boot.isEmpty ? "" : " boot=\(boot)") + "\n"
        }
        return Array(text.utf8)
    }

    /// The file at `path`, nil when there is none or its first line is no pid. Read before anyone
    /// checked whose state folder it is in (the CLI finds the folder by name): only a regular file
    /// (`readSmallRegularFile`), its first 512 bytes.
    public static func read(_ path: String) -> DaemonPIDFile? {
        readSmallRegularFile(path, limit: 512).flatMap(parse)
    }

    /// A pid file's bytes: the pid, then `key=value` words (unknown keys left alone).
    public static func parse(_ bytes: [UInt8]) -> DaemonPIDFile? {
        let lines = bytes.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false)
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }
        guard let first = lines.first?.drop(while: blank) else { return nil }
        let digits = first.prefix(while: { $0 >= 0x30 && $0 <= 0x39 })
        guard first.dropFirst(digits.count).allSatisfy(blank), let pid = pid_t(String(decoding: digits, as: UTF8.self)), pid > 0 else { return nil }
        var file = DaemonPIDFile(pid: pid)
        if lines.count == 2 {
            for word in lines[1].split(whereSeparator: { $0 == 0x20 || $0 == 0x0A || $0 == 0x09 }) {
                let text = String(decoding: word, as: UTF8.self)
                guard let eq = text.firstIndex(of: "=") else { continue }
                let value = String(text[text.index(after: eq)...])
                switch text[..<eq] {
                case "start": file.start = UInt64(value)
                case "boot": file.bootID = value
                default: break
                }
            }
        }
        return file
    }
}
