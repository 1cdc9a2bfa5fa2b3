import Foundation
import Glibc
import XCTest
@testable import CoordFS

/// Who a caller is, when the kernel gives a thread id out again: the process of the thread that has
/// the id now, never that of the thread that had it before (`ProcessNames`).
final class ProcessNamesTests: XCTestCase {
    /// A thread of one process (a Python thread) is learned; it ends; the kernel's next id is set
    /// to it (`/proc/sys/kernel/ns_last_pid`, root) and another process takes it: `process(of:)`
    /// and `identity(of:)` name that process. Before, `process(of:)` named the first thread's.
    func testARecycledThreadIdIsTakenForItsNewProcess() throws {
        guard getuid() == 0, access("/proc/sys/kernel/ns_last_pid", W_OK) == 0 else { throw XCTSkip("sets ns_last_pid: needs root") }
        let names = ProcessNames(limit: 64)
        // A process whose second thread says its id, then ends when told; the process stays.
        let script = """
        import sys, threading
        go = threading.Event()
        def run():
            print(threading.get_native_id(), flush=True)
            go.wait()
        t = threading.Thread(target=run); t.start()
        sys.stdin.readline(); go.set(); t.join()
        print("ended", flush=True)
        sys.stdin.readline()
        """
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = ["-c", script]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        defer { try? input.fileHandleForWriting.close(); holder.waitUntilExit() }
        let lines = LineReader(output.fileHandleForReading)
        let tid = try XCTUnwrap(lines.next().flatMap { pid_t($0) }, "the thread's id")
        XCTAssertNotEqual(tid, holder.processIdentifier)
        XCTAssertEqual(names.process(of: tid), holder.processIdentifier, "the thread's process")

        input.fileHandleForWriting.write("\n".data(using: .utf8)!)
        XCTAssertEqual(lines.next(), "ended")
        // Joined, the thread is still reaped a moment later.
        let gone = Date().addingTimeInterval(5)
        while FileManager.default.fileExists(atPath: "/proc/\(holder.processIdentifier)/task/\(tid)") && Date() < gone { usleep(2_000) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/proc/\(holder.processIdentifier)/task/\(tid)"), "the thread ended")

        // Another process gets the id (other forks on the machine may take it first: a few tries).
        var taker: Process?
        for _ in 0..<20 where taker == nil {
            try String(tid - 1).write(toFile: "/proc/sys/kernel/ns_last_pid", atomically: false, encoding: .utf8)
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sleep")
            p.arguments = ["30"]
            try p.run()
            if p.processIdentifier == tid { taker = p } else { p.terminate(); p.waitUntilExit() }
        }
        let other = try XCTUnwrap(taker, "no process got id \(tid) in 20 tries")
        defer { other.terminate(); other.waitUntilExit() }
        XCTAssertEqual(names.process(of: tid), tid, "the id's process now, not \(holder.processIdentifier), whose thread had it")
        XCTAssertEqual(names.identity(of: tid).pid, tid)
    }
}

/// Lines from a pipe, one at a time (nil at the end).
private final class LineReader {
    private let handle: FileHandle
    private var buffer = Data()
    init(_ handle: FileHandle) { self.handle = handle }
    func next() -> String? {
        while true {
            if let nl = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[buffer.startIndex..<nl], as: UTF8.self)
                buffer = Data(buffer[(nl + 1)...])
                return line
            }
            let chunk = handle.availableData
            if chunk.isEmpty { return nil }
            buffer += chunk
        }
    }
}
