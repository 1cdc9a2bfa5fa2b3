// Control-protocol benchmarks: the ask -> answer round trip to an out-of-process presenter over
// the control socket (median, p99), with a minimal raw-socket presenter and with the Swift
// client library (its bare client, and its session as CoordFSClient's presenters use it), and the daemon-side memory for 1,000 connected presenters; then the same end to
// end through a real mount served by this process (the daemon's ControlService): a read through
// the mount asks an out-of-process presenter to save, and 1,000 presenter connections are held.
// Build with `-c release` to measure: `swift run -c release coordfs-bench protocol`.
import ControlProtocol
import Coordination
import CoordFS
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum ProtocolBench {
    /// `coordfs-bench protocol [--iterations N] [--clients N] [--mount-iterations N] [--no-mount]`
    /// (internal: `--child-presenter SOCKET raw|library|session|session-pool`, `--child-idle SOCKET N`)
    static func run(_ args: [String]) async throws {
        if args.first == "--child-presenter", args.count >= 3 { return try await childPresenter(socket: args[1], mode: args[2]) }
        if args.first == "--child-idle", args.count >= 3 { return try childIdle(socket: args[1], count: Int(args[2]) ?? 1000) }
        var iterations = 20_000
        var clients = 1000
        var mountIterations = 5_000
        var withMount = true
        var index = 0
        while index < args.count {
            let value = index + 1 < args.count ? Int(args[index + 1]) : nil
            switch args[index] {
            case "--iterations": iterations = value ?? iterations; index += 2
            case "--clients": clients = value ?? clients; index += 2
            case "--mount-iterations": mountIterations = value ?? mountIterations; index += 2
            case "--no-mount": withMount = false; index += 1
            default: throw BenchError.usage("unknown option \(args[index])")
            }
        }
        ControlServer.raiseFileDescriptorLimit()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("coordfs-protocol-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socketPath = directory + "/control.sock"
        let handler = BenchHandler()
        let server = ControlServer(configuration: .init(socketPath: socketPath), handler: handler)
        try server.start()
        defer { server.stop() }

        let raw = try measureRoundTrips(server: server, handler: handler, socketPath: socketPath, mode: "raw", iterations: iterations)
        let library = try measureRoundTrips(server: server, handler: handler, socketPath: socketPath, mode: "library", iterations: iterations)
        let session = try measureRoundTrips(server: server, handler: handler, socketPath: socketPath, mode: "session", iterations: iterations)
        let sessionPool = try measureRoundTrips(server: server, handler: handler, socketPath: socketPath, mode: "session-pool", iterations: iterations)
        let memory = try measureMemory(server: server, handler: handler, socketPath: socketPath, clients: clients)
        let mounted = withMount ? try measureThroughMount(directory: directory, iterations: mountIterations, clients: clients) : nil

        func us(_ ns: UInt64) -> String { String(format: "%.1f µs", Double(ns) / 1000) }
        print("## Control protocol")
        print("")
        print("| benchmark | result |")
        print("|---|---|")
        print("| ask -> answer round trip, out-of-process raw-socket presenter (\(raw.count) asks): median / p99 / max | \(us(raw.median)) / \(us(raw.p99)) / \(us(raw.max)) |")
        print("| same, presenter using the Swift client library: median / p99 / max | \(us(library.median)) / \(us(library.p99)) / \(us(library.max)) |")
        print("| same, presenter behind the library's session (as CoordFSClient's FilePresenters are: one task per presenter answers, run on the reader thread when made ready there): median / p99 / max | \(us(session.median)) / \(us(session.p99)) / \(us(session.max)) |")
        print("| same, the presenter's task on the global pool instead (as before: a thread wake-up per ask): median / p99 / max | \(us(sessionPool.median)) / \(us(sessionPool.p99)) / \(us(sessionPool.max)) |")
        print("| \(memory.clients) connected presenters (hello done, one registered presenter each): daemon RSS before / after / per client | \(mib(memory.before)) / \(mib(memory.after)) / \(String(format: "%.1f KiB", Double(memory.after - memory.before) / 1024 / Double(max(memory.clients, 1)))) |")
        if let mounted {
            print("| through a real mount (ControlService): save ask -> answer, out-of-process raw presenter, as the coordinator measures it (\(mounted.asks.count) asks): median / p99 / max | \(us(mounted.asks.median)) / \(us(mounted.asks.p99)) / \(us(mounted.asks.max)) |")
            print("| same: the reader's open()+close() through the mount, including the ask: median / p99 | \(us(mounted.opens.median)) / \(us(mounted.opens.p99)) |")
            print("| through a real mount: \(mounted.clients) presenter connections registered with the mount's daemon: RSS of the daemon process before / after / per presenter | \(mib(mounted.before)) / \(mib(mounted.after)) / \(String(format: "%.1f KiB", Double(mounted.after - mounted.before) / 1024 / Double(max(mounted.clients, 1)))) |")
        }
        let mountMet = mounted.map { $0.asks.median < 100_000 && $0.after < 128 << 20 } ?? true
        print("| target: median under 100 µs; 1,000 presenters under 128 MiB | \(raw.median < 100_000 && memory.after < 128 << 20 && mountMet ? "met" : "NOT met") |")
        print("| target: median at most 50 µs through the Swift client (client and session) | \(library.median <= 50_000 && session.median <= 50_000 ? "met" : "NOT met") |")
    }

    enum BenchError: Error { case usage(String), child(String) }

    struct Latencies { var count: Int; var median: UInt64; var p99: UInt64; var max: UInt64 }

    private static func mib(_ bytes: Int) -> String { String(format: "%.1f MiB", Double(bytes) / 1048576) }

    /// Accepts registrations and records connections; asks are sent by the benchmark itself.
    final class BenchHandler: ControlServerHandler, @unchecked Sendable {
        let lock = NSLock()
        var opened: [ControlConnection] = []
        var registered: [(ControlConnection, PresenterID, MountPath)] = []
        var next: UInt64 = 0

        func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) {
            lock.withLock { opened.append(connection) }
        }
        func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection) {
            if case .register(let r) = message {
                let id = lock.withLock { () -> PresenterID in
                    next += 1
                    registered.append((connection, PresenterID(next), r.path))
                    return PresenterID(next)
                }
                connection.send(.registered(Registered(id: r.id, presenter: id)))
            }
        }
        func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason) {
            lock.withLock {
                opened.removeAll { $0 === connection }
                registered.removeAll { $0.0 === connection }
            }
        }
        var registrationCount: Int { lock.withLock { registered.count } }
    }

    private static func selfExecutable() -> URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    }

    private static func measureRoundTrips(server: ControlServer, handler: BenchHandler, socketPath: String, mode: String, iterations: Int) throws -> Latencies {
        let child = Process()
        child.executableURL = selfExecutable()
        child.arguments = ["protocol", "--child-presenter", socketPath, mode]
        try child.run()
        defer {
            child.terminate()
            child.waitUntilExit()
        }
        let before = handler.registrationCount
        let deadline = Date().addingTimeInterval(10)
        while handler.registrationCount == before {
            if Date() > deadline { throw BenchError.child("the presenter process did not register") }
            usleep(1000)
        }
        let (connection, presenter, path) = handler.lock.withLock { handler.registered.last! }
        let done = DispatchSemaphore(value: 0)
        var samples: [UInt64] = []
        samples.reserveCapacity(iterations)
        let warmup = min(1000, iterations / 10)
        for round in 0..<(warmup + iterations) {
            let start = DispatchTime.now().uptimeNanoseconds
            let result = Box()
            connection.ask(.save, presenter: presenter, path: path, deadline: .seconds(5)) { outcome in
                result.outcome = outcome
                done.signal()
            }
            done.wait()
            let elapsed = DispatchTime.now().uptimeNanoseconds - start
            guard case .answered = result.outcome else { throw BenchError.child("ask \(round) ended \(String(describing: result.outcome))") }
            if round >= warmup { samples.append(elapsed) }
        }
        connection.close()
        samples.sort()
        return Latencies(count: samples.count, median: samples[samples.count / 2],
                         p99: samples[min(samples.count - 1, samples.count * 99 / 100)], max: samples.last!)
    }

    private final class Box: @unchecked Sendable { var outcome: AskOutcome? }

    private static func measureMemory(server: ControlServer, handler: BenchHandler, socketPath: String, clients: Int) throws -> (clients: Int, before: Int, after: Int) {
        let before = residentBytes()
        let child = Process()
        child.executableURL = selfExecutable()
        child.arguments = ["protocol", "--child-idle", socketPath, String(clients)]
        try child.run()
        defer {
            child.terminate()
            child.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(60)
        while handler.registrationCount < clients {
            if Date() > deadline || !child.isRunning { throw BenchError.child("only \(handler.registrationCount) of \(clients) clients registered") }
            usleep(10_000)
        }
        usleep(200_000)  // let the queues settle
        return (server.connectionCount, before, residentBytes())
    }

    struct MountFigures { var asks: Latencies; var opens: Latencies; var clients: Int; var before: Int; var after: Int }

    /// Collects the coordinator's ask -> answer latencies (its own clock, from sending the ask to
    /// taking the answer), then passes each event on.
    private final class AnswerLatencies: CoordinationEventSink, @unchecked Sendable {
        let lock = NSLock()
        var samples: [UInt64] = []
        func record(_ event: CoordinationEvent) {
            // Only saves cross the socket: the presenter did not subscribe to the relinquish the
            // daemon answers for it.
            if case .presenterAnswered(_, .saveChanges, let nanos) = event.kind { lock.withLock { samples.append(nanos) } }
        }
        func take() -> [UInt64] { lock.withLock { defer { samples = [] }; return samples } }
    }

    /// Mounts `directory/backing` on `directory/mnt` in this process (the daemon with its control
    /// socket), lets a child process present `bench.txt` over the socket, and reads the file
    /// through the mount: each open asks the presenter to save first. Then holds `clients`
    /// presenter connections and reports this process's RSS (the daemon) before and after.
    private static func measureThroughMount(directory: String, iterations: Int, clients: Int) throws -> MountFigures {
        let backing = directory + "/backing", mnt = directory + "/mnt"
        try FileManager.default.createDirectory(atPath: backing + "/idle", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        try "bench\n".write(toFile: backing + "/bench.txt", atomically: false, encoding: .utf8)
        var options = MountOptions()
        options.eventLog.enabled = false  // the figure is the socket round trip, not the log's I/O
        let daemon = try Daemon(plan: try MountPreflight.plan(backing: backing, mountpoint: mnt, options: options))
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        let latencies = AnswerLatencies()
        daemon.coordinator.eventSink = latencies
        let socketPath = daemon.plan.state.controlSocket

        let child = Process()
        child.executableURL = selfExecutable()
        child.arguments = ["protocol", "--child-presenter", socketPath, "raw"]
        try child.run()
        defer {
            child.terminate()
            child.waitUntilExit()
        }
        let registered = Date().addingTimeInterval(10)
        while daemon.coordinator.presenterCount == 0 {
            if Date() > registered { throw BenchError.child("the presenter process did not register with the mount") }
            usleep(1000)
        }
        let file = mnt + "/bench.txt"
        var opens: [UInt64] = []
        opens.reserveCapacity(iterations)
        let warmup = min(500, iterations / 10)
        for round in 0..<(warmup + iterations) {
            let start = DispatchTime.now().uptimeNanoseconds
            let fd = open(file, O_RDONLY)
            guard fd >= 0 else { throw BenchError.child("open through the mount: errno \(errno)") }
            close(fd)
            if round >= warmup { opens.append(DispatchTime.now().uptimeNanoseconds - start) }
            if round == warmup - 1 { _ = latencies.take() }
        }
        let asks = latencies.take()
        guard asks.count >= iterations else { throw BenchError.child("only \(asks.count) asks answered for \(iterations) reads") }
        func summary(_ values: [UInt64]) -> Latencies {
            let sorted = values.sorted()
            return Latencies(count: sorted.count, median: sorted[sorted.count / 2],
                             p99: sorted[min(sorted.count - 1, sorted.count * 99 / 100)], max: sorted.last!)
        }
        child.terminate()
        child.waitUntilExit()
        let gone = Date().addingTimeInterval(10)
        while daemon.coordinator.presenterCount > 0 && Date() < gone { usleep(1000) }

        let before = residentBytes()
        let idle = Process()
        idle.executableURL = selfExecutable()
        idle.arguments = ["protocol", "--child-idle", socketPath, String(clients)]
        try idle.run()
        defer {
            idle.terminate()
            idle.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(60)
        while daemon.coordinator.presenterCount < clients {
            if Date() > deadline || !idle.isRunning { throw BenchError.child("only \(daemon.coordinator.presenterCount) of \(clients) presenters registered with the mount") }
            usleep(10_000)
        }
        usleep(200_000)
        return MountFigures(asks: summary(asks), opens: summary(opens), clients: daemon.coordinator.presenterCount,
                            before: before, after: residentBytes())
    }

    private static func residentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kib * 1024
    }

    // MARK: Child processes

    /// A presenter process: registers `bench.txt` and answers every ask at once.
    private static func childPresenter(socket path: String, mode: String) async throws {
        if mode == "session" || mode == "session-pool" {
            final class Answering: PresenterEndpoint {
                func perform(_ ask: Ask) async -> ErrorBody? { nil }
                func receive(_ event: PresenterEvent) async {}
            }
            let session = ControlSession(socketPath: { path }, options: .init(clientName: "bench-presenter", presentersOnReaderThread: mode == "session"))
            _ = try await session.register(try MountPath(validating: "bench.txt"), kind: .file, asks: [.save], endpoint: Answering())
            while true { try await Task.sleep(for: .seconds(3600)) }
        }
        if mode == "library" {
            final class Answering: ControlClientDelegate, @unchecked Sendable {
                let closed = DispatchSemaphore(value: 0)
                var receivesOnReaderThread: Bool { true }
                func controlClient(_ client: ControlClient, didReceive ask: Ask) { client.answer(ask.id) }
                func controlClient(_ client: ControlClient, didReceive notification: ControlProtocol.PresenterNotification) {}
                func controlClient(_ client: ControlClient, didCloseWith error: ControlTransportError?) { closed.signal() }
            }
            let delegate = Answering()
            let client = try ControlClient.connect(socketPath: path, clientName: "bench-presenter", delegate: delegate)
            _ = try await client.register(try MountPath(validating: "bench.txt"), kind: .file, asks: [.save])
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().async {
                    delegate.closed.wait()
                    continuation.resume()
                }
            }
            return
        }
        let fd = try rawConnect(path)
        defer { close(fd) }
        try rawSend(fd, .hello(Hello(id: ControlProtocol.RequestID(1), client: "bench-presenter")))
        try rawSend(fd, .register(Register(id: ControlProtocol.RequestID(2), path: try MountPath(validating: "bench.txt"), kind: .file, asks: [.save])))
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            while let payload = try decoder.nextFrame() {
                if case .ask(let ask) = try ControlMessage.decode(payload: payload) {
                    try rawSend(fd, .answer(Answer(id: ask.id)))
                }
            }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            decoder.append(buffer[0..<n])
        }
    }

    /// Opens `count` connections, each saying hello and registering one presenter, then idles.
    private static func childIdle(socket path: String, count: Int) throws {
        ControlServer.raiseFileDescriptorLimit()
        var fds: [Int32] = []
        for index in 0..<count {
            let fd = try rawConnect(path)
            try rawSend(fd, .hello(Hello(id: ControlProtocol.RequestID(1), client: "idle-\(index)")))
            try rawSend(fd, .register(Register(id: ControlProtocol.RequestID(2), path: try MountPath(validating: "idle/\(index).txt"), kind: .file)))
            fds.append(fd)
        }
        // Drain replies now and then so the daemon never sees a slow consumer; exit when killed.
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            for fd in fds {
                _ = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            }
            sleep(1)
        }
    }

    private static func rawConnect(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError.child("socket: errno \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else { throw BenchError.child("socket path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw BenchError.child("connect \(path): errno \(errno)")
        }
        return fd
    }

    private static func rawSend(_ fd: Int32, _ message: ControlMessage) throws {
        let frame = message.encodedFrame()
        var offset = 0
        while offset < frame.count {
            let n = frame.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw BenchError.child("send: errno \(errno)") }
            offset += n
        }
    }
}
