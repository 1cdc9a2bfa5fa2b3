import XCTest
import Foundation
import Glibc
import Dispatch
import Synchronization
import ControlProtocol
import Coordination
@testable import CoordFS

/// Many presenters on one mount (issue 17, items 4 and 5): a write to their document, and
/// `coordfs status`, stay fast and work. The presenters are registered through connections of
/// 10,000 each, each sending its `register` frames at once and reading the replies after, so
/// setting them up costs seconds, not minutes. `make test` runs them with 20,000 presenters;
/// `make scale` with 100,000 (`COORDFS_SCALE_PRESENTERS=N` sets the number).
final class ScaleTests: ClientMountTestCase {
    static let presenters = Int(ProcessInfo.processInfo.environment["COORDFS_SCALE_PRESENTERS"] ?? "") ?? 20_000
    static let perConnection = 10_000

    override func configure(_ options: inout MountOptions) {
        super.configure(&options)
        options.coordination.askTimeout = 5
    }

    /// Registers `count` presenters of `path` on `client` (pipelined); returns their ids.
    func registerMany(_ client: RawClient, _ path: String, count: Int, asks: Set<AskKind> = []) throws -> [PresenterID] {
        let mountPath = try MountPath(validating: path)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count * 100)
        for _ in 0..<count {
            bytes += ControlMessage.register(Register(id: client.id(), path: mountPath, kind: .file, asks: asks)).encodedFrame()
        }
        client.sendAll(bytes)
        var ids: [PresenterID] = []
        while ids.count < count, let message = client.receive() {
            switch message {
            case .registered(let r): ids.append(r.presenter)
            case .error(let e): XCTFail("register refused: \(e.code) \(e.message)"); return ids
            default: continue
            }
        }
        return ids
    }

    /// `count` presenters of `path` through `count / perConnection` connections.
    func present(_ path: String, count: Int = ScaleTests.presenters) throws -> [(client: RawClient, presenters: Int)] {
        var clients: [(client: RawClient, presenters: Int)] = []
        var registered = 0
        while registered < count {
            let client = try RawClient(socket: socketPath)
            XCTAssertTrue(client.hello())
            let n = min(Self.perConnection, count - registered)
            let ids = try registerMany(client, path, count: n)
            registered += ids.count
            clients.append((client, ids.count))
        }
        XCTAssertEqual(registered, count)
        return clients
    }

    /// What two writes to a document with `count` notification-only presenters cost: each
    /// connection is read while the writes happen (a client that stops reading is dropped), and
    /// the cost ends once every presenter has heard of both (didChange) or at the timeout.
    struct TwoWrites { var told: Int; var seconds: Double; var cpuSeconds: Double; var notifiedAfter: Double }
    func writeTwice(_ name: String, _ clients: [(client: RawClient, presenters: Int)]) throws -> TwoWrites {
        let counts = clients.map { client, presenters in
            Counter(client, until: { if case .notification(let n) = $0, case .didChange = n.event { return true }; return false }, count: 2 * presenters)
        }
        let cpu = Self.cpuSeconds()
        let write = Date()
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo new > '\(mnt!)/\(name)'"], timeout: 120).status, 0)
        // The access ends at close; the next writer waits for it.
        XCTAssertEqual(try run(["/bin/sh", "-c", "echo newer > '\(mnt!)/\(name)'"], timeout: 120).status, 0)
        let written = Date().timeIntervalSince(write)
        XCTAssertEqual(readBacking(name), "newer\n")
        let told = counts.map { $0.wait(timeout: 60) }.reduce(0, +)
        return TwoWrites(told: told, seconds: written, cpuSeconds: Self.cpuSeconds() - cpu, notifiedAfter: Date().timeIntervalSince(write))
    }

    /// Item 4: many notification-only presenters on one document; a write to it through the mount
    /// and the next writer after it finish (each within `writeTwice`'s 120 s, a guard against a
    /// hang, not a speed bound: their time is printed and the clock is the machine's load's), and
    /// every presenter hears of both. The cost
    /// per presenter stays flat: the CPU time this process (the daemon and the presenters'
    /// readers) spends on the two writes, per presenter, is compared between an eighth of the
    /// presenters and all of them. It is about the same; a cost per presenter that grew with their
    /// number (each presenter found by a walk of the others: 484 s for one write with 100,000
    /// before issue 17) makes it 3.4 times higher at 20,000 and 6 times at 100,000. CPU time, not
    /// the clock: other work on the machine stretches the clock, hardly this process's CPU time.
    func testAWriteToADocumentWithManyPresentersStaysLinear() throws {
        try writeBacking("few.txt", "old\n")
        try writeBacking("doc.txt", "old\n")
        let few = max(Self.presenters / 8, 1)
        let fewClients = try present("few.txt", count: few)
        XCTAssertTrue(eventually(timeout: 60) { self.presenterCount == few })
        let fewWrites = try writeTwice("few.txt", fewClients)
        XCTAssertEqual(fewWrites.told, 2 * few, "every presenter heard of both writes")
        for (client, _) in fewClients { shutdown(client.fd, Int32(SHUT_RDWR)) }
        XCTAssertTrue(eventually(timeout: 60) { self.presenterCount == 0 })

        let rssBefore = Self.residentMegabytes()
        let started = Date()
        let clients = try present("doc.txt")
        let registered = Date().timeIntervalSince(started)
        XCTAssertTrue(eventually(timeout: 60) { self.presenterCount == Self.presenters })
        let writes = try writeTwice("doc.txt", clients)
        print("ScaleTests: notified after \(writes.notifiedAfter) s")
        let rssPeak = Self.residentMegabytes()
        let closing = Date()
        for (client, _) in clients { shutdown(client.fd, Int32(SHUT_RDWR)) }
        XCTAssertTrue(eventually(timeout: 60) { self.presenterCount == 0 })
        print("ScaleTests: presenters gone after \(Date().timeIntervalSince(closing)) s")
        // Memory given back once they are gone (the store's queue and the trim run just after).
        daemon.store?.tapDrain()
        sleep(2)
        let rssAfter = Self.residentMegabytes()
        print("ScaleTests: resident memory \(rssBefore) MB before, \(rssPeak) MB with \(Self.presenters) presenters, \(rssAfter) MB after they left")
        XCTAssertLessThan(rssAfter - rssBefore, max(0.6 * (rssPeak - rssBefore), 50), "most of the presenters' memory is given back")
        XCTAssertEqual(writes.told, 2 * Self.presenters, "every presenter heard of both writes")
        print("ScaleTests: registered \(Self.presenters) presenters in \(registered) s; two writes took \(writes.seconds) s")
        let perFew = fewWrites.cpuSeconds / Double(few), perAll = writes.cpuSeconds / Double(Self.presenters)
        print("ScaleTests: CPU time of two writes: \(fewWrites.cpuSeconds) s with \(few) presenters, \(writes.cpuSeconds) s with \(Self.presenters) (\(perAll / perFew) times as much per presenter)")
        XCTAssertLessThan(perAll, 2.5 * perFew, "the cost of a write per presenter grows with their number: \(fewWrites.cpuSeconds) s CPU with \(few), \(writes.cpuSeconds) s with \(Self.presenters)")
    }

    /// Item 5: the status of a mount with many presenters is far beyond one 1 MiB frame (about
    /// 1.8 MB of JSON with 20,000, 9 MB with 100,000): it comes in parts (each a frame within the
    /// limit, all but the last marked `more`), and `coordfs status` shows all of it.
    func testStatusWithManyPresentersComesInParts() throws {
        try writeBacking("doc.txt", "old\n")
        let clients = try present("doc.txt")
        XCTAssertEqual(presenterCount, Self.presenters)
        // On the wire: parts within the frame limit, `more` on all but the last.
        let raw = clients[0].client
        let id = raw.id()
        raw.send(.status(StatusQuery(id: id)))
        var parts: [StatusReport] = []
        while parts.last?.more ?? true, let message = raw.receive() {
            if case .statusReport(let part) = message, part.id == id { parts.append(part) }
            if case .error(let error) = message { return XCTFail("status refused: \(error.code) \(error.message)") }
        }
        // No part at all (the daemon did not answer within the client's timeout) fails here,
        // before `parts.count - 1` below would be negative and end the whole test process.
        guard !parts.isEmpty else { return XCTFail("no status report came within the client's receive timeout") }
        XCTAssertGreaterThan(parts.count, 1, "a report of \(Self.presenters) presenters does not fit one frame")
        XCTAssertEqual(parts.map(\.more), Array(repeating: true, count: parts.count - 1) + [false])
        XCTAssertEqual(parts.map(\.presenters.count).reduce(0, +), Self.presenters)
        // The command line shows every presenter.
        let started = Date()
        let (status, output) = try run([try Self.coordfsBinary(), "status", mnt, "--json"], timeout: 120)
        XCTAssertEqual(status, 0, String(output.prefix(500)))
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        XCTAssertEqual((object?["presenters"] as? [Any])?.count, Self.presenters)
        print("ScaleTests: coordfs status --json with \(Self.presenters) presenters took \(Date().timeIntervalSince(started)) s")
    }

    /// One status entry larger than a frame: an access held with 64 intents whose paths are 13
    /// names of 250 DEL characters. A client may send DEL as it is (1 byte; the request is about
    /// 200 KiB), while the daemon writes it as `\\u007f` (6 bytes), so the access is about 1.2 MiB
    /// as one entry. It reaches the client in entries within the 1 MiB frame limit, marked
    /// `continues`, and `coordfs status --json` shows the one access with all 64 intents (the old
    /// daemon sent one oversized frame, which the client refused: `frameTooLarge`).
    func testAStatusEntryLargerThanAFrameIsSplitAndShownWhole() throws {
        let paths = try longDELPaths()
        let raw = try RawClient(socket: socketPath)
        XCTAssertTrue(raw.hello())
        let intents = try paths.map { Intent.writing(try MountPath(validating: $0)) }
        // The request written by hand, DEL unescaped (valid JSON: only controls below 0x20 must be escaped).
        let request = raw.id()
        let body = #"{"type":"coordinate","id":\#(request.rawValue),"intents":["#
            + paths.map { #"{"intent":"write","path":"\#($0)"}"# }.joined(separator: ",") + "]}"
        XCTAssertLessThan(body.utf8.count, Framing.defaultMaxFrameSize)
        raw.sendBytes(Framing.frame(Array(body.utf8)))
        var reply: ControlMessage?
        repeat { reply = raw.receive() } while reply != nil && reply?.requestID != request
        guard case .granted(let granted)? = reply else {
            return XCTFail("the access with 64 intents was not granted: \(String(describing: reply).prefix(300))")
        }
        // On the wire: every frame within the limit, the access sent in several entries.
        let id = raw.id()
        raw.send(.status(StatusQuery(id: id)))
        var whole = StatusReport(id: id)
        repeat {
            guard let message = raw.receive() else { return XCTFail("status: no reply within the frame limit") }
            if case .error(let error) = message { return XCTFail("status refused: \(error.code) \(error.message)") }
            if case .statusReport(let part) = message, part.id == id { whole.append(part) }
        } while whole.more
        XCTAssertEqual(whole.accesses.first { $0.access == granted.access }?.intents, intents)

        let (status, output) = try run([try Self.coordfsBinary(), "status", mnt, "--json"], timeout: 60)
        XCTAssertEqual(status, 0, String(output.prefix(500)))
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        let accesses = object?["accesses"] as? [[String: Any]] ?? []
        XCTAssertEqual(accesses.map { ($0["intents"] as? [Any])?.count }, [64], "one access, every intent: \(String(output.prefix(300)))")
        XCTAssertFalse(output.contains("continues"), "the entries are joined again")
    }

    /// A status report its client does not read costs the daemon one frame at a time: 80 accesses
    /// held, each with 64 intents of paths of 13 names of 250 DEL characters (about 1.2 MiB of
    /// JSON each: the daemon escapes DEL), make a report of about 96 MiB. Before, the daemon
    /// encoded all of it at the request and held it until the client read it (any user may ask
    /// `status` on each of its connections, so one user's paths could make it hold gigabytes);
    /// now the daemon's memory grows by a few MiB while the client does not read, and the whole
    /// report still arrives once it reads.
    func testAStatusReportItsClientDoesNotReadCostsTheDaemonOneFrameAtATime() throws {
        let paths = try longDELPaths()
        let holder = try RawClient(socket: socketPath)
        XCTAssertTrue(holder.hello())
        let body = { (id: UInt64) in
            #"{"type":"coordinate","id":\#(id),"intents":["# + paths.map { #"{"intent":"read","path":"\#($0)"}"# }.joined(separator: ",") + "]}"
        }
        let accesses = 80
        var requests: Set<UInt64> = []
        var bytes: [UInt8] = []
        for _ in 0..<accesses {
            let id = holder.id().rawValue
            requests.insert(id)
            bytes += Framing.frame(Array(body(id).utf8))
        }
        holder.sendAll(bytes)
        var granted = 0
        while granted < accesses, let reply = holder.receive() {
            if case .granted(let g) = reply, requests.contains(g.id.rawValue) { granted += 1 }
            if case .error(let e) = reply { return XCTFail("coordinate refused: \(e.code) \(e.message)") }
        }
        XCTAssertEqual(granted, accesses)
        let reader = try RawClient(socket: socketPath)
        XCTAssertTrue(reader.hello())
        reader.setReceiveTimeout(seconds: 120)
        let before = Self.residentMegabytes()
        let id = reader.id()
        reader.send(.status(StatusQuery(id: id)))
        // The daemon's memory while the client does not read, sampled for 8 s.
        var held = before
        for _ in 0..<32 {
            usleep(250_000)
            held = max(held, Self.residentMegabytes())
        }
        print("ScaleTests: resident memory \(before) MB before a status of \(accesses) large accesses, at most \(held) MB while its client does not read")
        XCTAssertLessThan(held - before, 40, "the daemon holds the report a frame at a time, not whole (about 96 MiB)")
        // Read now: the whole report, every access with its 64 intents.
        let reading = Date()
        var whole = StatusReport(id: id)
        repeat {
            guard let message = reader.receive() else { return XCTFail("status: no reply") }
            if case .error(let error) = message { return XCTFail("status refused: \(error.code) \(error.message)") }
            if case .statusReport(let part) = message, part.id == id { whole.append(part) }
        } while whole.more
        print("ScaleTests: the rest of the report read in \(Date().timeIntervalSince(reading)) s")
        XCTAssertEqual(whole.accesses.count, accesses)
        XCTAssertTrue(whole.accesses.allSatisfy { $0.intents.count == 64 }, "\(whole.accesses.map(\.intents.count))")
    }
}

extension ScaleTests {
    /// 64 paths of 13 names of 250 DEL characters (the folder made in the backing folder): about
    /// 1.2 MiB of JSON as the daemon writes them (`\\u007f`), 200 KiB as a client may send them.
    func longDELPaths() throws -> [String] {
        let name = String(repeating: "\u{7F}", count: 250)
        let folder = Array(repeating: name, count: 12).joined(separator: "/")
        try FileManager.default.createDirectory(atPath: backing + "/" + folder, withIntermediateDirectories: true)
        return (0..<64).map { folder + "/\($0)-" + name }
    }

    /// The CPU time (user and system) of this process, all threads, in seconds.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// This process's resident memory (the daemon runs in it), from /proc/self/statm.
    static func residentMegabytes() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        return fields.count > 1 ? (Double(fields[1]) ?? 0) * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576 : 0
    }
}

extension RawClient {
    /// Sends every byte (a blocking socket may take a large buffer in several steps).
    func sendAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n < 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }

    func setReceiveTimeout(seconds: Int) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// Reads a client on a thread of its own and counts the messages that match, up to `count`.
final class Counter: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let matched = Mutex(0)

    init(_ client: RawClient, until match: @escaping @Sendable (ControlMessage) -> Bool, count: Int) {
        client.setReceiveTimeout(seconds: 120)
        nonisolated(unsafe) let client = client  // read only by this thread from now on
        let thread = Thread { [self] in
            var n = 0
            while n < count, let message = client.receive() {
                if match(message) { n += 1; matched.withLock { $0 = n } }
            }
            done.signal()
        }
        thread.start()
    }

    /// The number matched once `count` were seen, or at the timeout.
    func wait(timeout: Double) -> Int {
        _ = done.wait(timeout: .now() + timeout)
        return matched.withLock { $0 }
    }
}
