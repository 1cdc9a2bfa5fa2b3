// The kernel's floor (issue 23): how fast can any FUSE daemon on this kernel and machine go, doing
// no work at all? `FuseKit.FloorFileSystem` (answers at once: no backing folder, no coordination, no
// log) mounted in this process on both transports, with FuseKit's default spin and with spin=0,
// and optionally with the whole daemon and the tool on one CPU; `bench/smallfiles.py` (the
// smallfiles workload of bench/run.sh, the same program) through each, and natively in DIR. Prints
// files/s, the ratio to native, the requests per file (FuseKit's counters), the time per file and
// per synchronous round trip, the daemon's CPU per request and the context switches per file.
// `coordfs-bench floor [--files N] [--rounds N] [--dir DIR] [--no-pin] [--script PATH]`
import CoordFS
import CURing
import Foundation
import FuseKit
import Glibc
import Synchronization

enum FloorBench {
    struct Options {
        var files = 10_000
        var rounds = 3
        var dir = "/var/tmp"
        var pin = true
        var script: String? = nil
        var coordfs = true
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--files": files = Int(i.next() ?? "") ?? files
                case "--rounds": rounds = max(1, Int(i.next() ?? "") ?? rounds)
                case "--dir": dir = i.next() ?? dir
                case "--no-pin": pin = false
                case "--no-coordfs": coordfs = false
                case "--script": script = i.next()
                default: throw MountBench.BenchError("unknown option \(a)")
                }
            }
        }
    }

    /// FuseKit's default spin (coordfs's `spin=200`, adaptive) or none.
    static let defaultSpinMicroseconds = 200

    struct Variant {
        let transport: FuseTransport
        let spin: Bool
        let pinned: Bool
        /// coordfs itself (an in-process mount with its defaults) instead of the floor file system.
        var coordfs = false
        var name: String {
            coordfs ? "coordfs (defaults), \(transport == .uring ? "uring" : "dev")"
                : "floor, \(transport == .uring ? "uring" : "dev"), spin=\(spin ? "\(FloorBench.defaultSpinMicroseconds)" : "0")\(pinned ? ", one CPU" : "")"
        }
    }

    /// One run of the workload.
    struct Sample {
        var filesPerSecond: Double
        /// Requests by `FuseOperation` (empty for native).
        var requests: [UInt64] = []
        var daemonCPU: Double = 0
        var daemonSwitches = 0
        var toolSwitches = 0
        var transport = ""
        var passthrough = false
    }

    /// Requests the caller does not wait for: RELEASE, RELEASEDIR (sent in the background) and FORGET.
    static let asynchronous: Set<FuseOperation> = [.forget, .release, .releasedir]

    static func run(_ args: [String]) async throws {
        var o = Options()
        try o.parse(args)
        let script = o.script ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("bench/smallfiles.py").path
        guard FileManager.default.fileExists(atPath: script) else { throw MountBench.BenchError("no workload script at \(script) (--script PATH)") }
        guard geteuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else { throw MountBench.BenchError("needs root and /dev/fuse") }
        let root = o.dir + "/coordfs-bench-floor-\(getpid())"
        for sub in ["/mnt"] { try FileManager.default.createDirectory(atPath: root + sub, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(atPath: root) }
        let scratch = open(root + "/scratch", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard scratch >= 0 else { throw MountBench.BenchError("cannot make the scratch backing file in \(o.dir)") }
        defer { close(scratch) }

        // FUSE over io_uring is offered only while enable_uring is Y (as bench/run.sh, put back after).
        let uringSwitch = "/sys/module/fuse/parameters/enable_uring"
        let uringWas = (try? String(contentsOfFile: uringSwitch, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        if uringWas == "N" { try? "Y".write(toFile: uringSwitch, atomically: false, encoding: .utf8) }
        defer { if uringWas == "N" { try? "N".write(toFile: uringSwitch, atomically: false, encoding: .utf8) } }

        var variants: [Variant] = []
        for pinned in o.pin ? [false, true] : [false] {
            for transport in [FuseTransport.uring, .dev] {
                for spin in [true, false] { variants.append(Variant(transport: transport, spin: spin, pinned: pinned)) }
            }
        }
        if o.coordfs {
            for transport in [FuseTransport.uring, .dev] { variants.append(Variant(transport: transport, spin: true, pinned: false, coordfs: true)) }
        }
        let load0 = loadAverage()
        var native: [Sample] = []
        var floor: [[Sample]] = Array(repeating: [], count: variants.count)
        let targets = variants.count + 1
        for r in 0..<o.rounds {
            for i in 0..<targets {
                let t = (i + r) % targets
                if t == variants.count {
                    native.append(try onFreshFileSystem(root + "/native-\(r)") { try workload(script: script, in: $0, files: o.files, pinned: false) })
                } else if variants[t].coordfs {
                    floor[t].append(try onFreshFileSystem(root + "/cf-\(r)-\(t)") { try coordfsMounted(variants[t].transport, in: $0, script: script, files: o.files) })
                } else {
                    floor[t].append(try mounted(variants[t], scratch: scratch, at: root + "/mnt", script: script, files: o.files))
                }
            }
        }
        report(o, variants: variants, native: native, floor: floor, loads: (load0, loadAverage()))
    }

    // MARK: running

    /// Mounts a `FloorFileSystem` for `variant` at `mountpoint`, runs the workload through it, and
    /// unmounts (always).
    static func mounted(_ variant: Variant, scratch: Int32, at mountpoint: String, script: String, files: Int) throws -> Sample {
        let fs = FloorFileSystem(scratchBacking: scratch)
        defer { fs.setBackingFileRegistry(nil) }   // the session holds the file system: no cycle left
        let ready = DispatchSemaphore(value: 0)
        // Pinned: every thread of the session is started from this one (the ring's at mount, libfuse's
        // workers from the serving thread), so they inherit its CPU.
        if variant.pinned { _ = pinCallingThread(toCPU: 0) }
        let session: FuseSession
        do {
            session = try FuseSession(fileSystem: fs, options: ["fsname=coordfs-floor", "subtype=coordfs-floor"], passthrough: true,
                                      spin: .microseconds(variant.spin ? defaultSpinMicroseconds : 0), adaptiveSpin: true,
                                      transport: variant.transport, onInit: { ready.signal() })
            fs.setBackingFileRegistry(session)
            try session.mount(at: mountpoint)
        } catch {
            if variant.pinned { _ = pinCallingThread(toCPU: nil) }
            throw error
        }
        let served = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = session.run(maxThreads: 16, handleSignals: false)
            served.signal()
        }
        if variant.pinned { _ = pinCallingThread(toCPU: nil) }
        defer {
            session.exit()
            if umount2(mountpoint, Int32(MNT_DETACH)) != 0 { session.unmount() }
            _ = served.wait(timeout: .now() + 10)
        }
        guard ready.wait(timeout: .now() + 10) == .success else { throw MountBench.BenchError("the floor mount did not answer INIT") }
        let counters = session.requestCounters
        func snapshot() -> [UInt64] { FuseOperation.allCases.map { counters.value($0) } }
        usleep(100_000)
        let before = snapshot()
        var sample = try workload(script: script, in: mountpoint, files: files, pinned: variant.pinned)
        usleep(200_000)   // late RELEASEs and FORGETs
        sample.requests = zip(snapshot(), before).map { $0 - $1 }
        sample.transport = session.transportInUse == .uring ? "io_uring" : "/dev/fuse"
        sample.passthrough = fs.writesPassThrough
        return sample
    }

    /// Runs `body` in a new folder `path` that is a fresh ext4 file system of its own (an image file
    /// beside it, loop-mounted: root), as bench/run.sh gives each metadata round (ext4 skips inodes
    /// deleted in the last minute when allocating, so a folder that saw earlier rounds is slower);
    /// a plain folder where that cannot be made. Unmounted and removed after.
    static func onFreshFileSystem<T>(_ path: String, _ body: (String) throws -> T) throws -> T {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let fresh = (try? MountBench.time("truncate -s 2G \(path).img && mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 \(path).img "
            + "&& mount -o loop \(path).img \(path)", in: "/")) != nil
        defer {
            if fresh { _ = try? MountBench.time("umount \(path) 2>/dev/null || umount -l \(path)", in: "/") }
            unlink(path + ".img")
            try? FileManager.default.removeItem(atPath: path)
        }
        sync()
        return try body(path)
    }

    /// The same workload through coordfs with its defaults (coordination, event log, store, backing
    /// watcher, passthrough) and `-o transport=`, an in-process mount as `coordfs-bench requests`'s,
    /// on a new backing folder under `folder` (removed after).
    static func coordfsMounted(_ transport: FuseTransport, in folder: String, script: String, files: Int) throws -> Sample {
        for sub in ["/backing", "/mnt"] { try FileManager.default.createDirectory(atPath: folder + sub, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var options = try MountOptions.parse([])
        options.transport = transport
        let daemon = try Daemon(plan: MountPreflight.plan(backing: folder + "/backing", mountpoint: folder + "/mnt", options: options))
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        guard let counters = daemon.requestCounters else { throw MountBench.BenchError("the coordfs mount has no request counters") }
        func snapshot() -> [UInt64] { FuseOperation.allCases.map { counters.value($0) } }
        usleep(100_000)
        let before = snapshot()
        var sample = try workload(script: script, in: folder + "/mnt", files: files, pinned: false)
        usleep(200_000)
        sample.requests = zip(snapshot(), before).map { $0 - $1 }
        sample.transport = daemon.transportInUse.map { $0 == .uring ? "io_uring" : "/dev/fuse" } ?? "?"
        sample.passthrough = true
        return sample
    }

    /// Runs bench/smallfiles.py in `dir` (on CPU 0 when `pinned`): its files/s, and this process's
    /// CPU time and context switches over it (the daemon's, when mounted here) and the tool's.
    static func workload(script: String, in dir: String, files: Int, pinned: Bool) throws -> Sample {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: pinned ? "/usr/bin/taskset" : "/usr/bin/python3")
        p.arguments = (pinned ? ["-c", "0", "python3"] : []) + [script, dir + "/small", "\(files)"]
        let out = Pipe()
        p.standardOutput = out
        let self0 = usage(RUSAGE_SELF), children0 = usage(RUSAGE_CHILDREN)
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let self1 = usage(RUSAGE_SELF), children1 = usage(RUSAGE_CHILDREN)
        guard p.terminationStatus == 0, let rate = Double(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw MountBench.BenchError("bench/smallfiles.py failed in \(dir) (status \(p.terminationStatus))")
        }
        return Sample(filesPerSecond: rate, daemonCPU: self1.cpu - self0.cpu, daemonSwitches: self1.switches - self0.switches,
                      toolSwitches: children1.switches - children0.switches)
    }

    static func usage(_ who: __rusage_who) -> (cpu: Double, switches: Int) {
        var u = rusage()
        getrusage(who.rawValue, &u)
        let cpu = Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
        return (cpu, u.ru_nvcsw + u.ru_nivcsw)
    }

    /// Pins the calling thread to `cpu`, or (nil) lets it run on every CPU again.
    @discardableResult
    static func pinCallingThread(toCPU cpu: Int?) -> Bool {
        (cpu.map { curing_pin_to_cpu(Int32($0)) } ?? curing_unpin()) == 0
    }

    static func loadAverage() -> String {
        ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
    }

    // MARK: the section

    static func best(_ s: [Sample]) -> Sample { s.max { $0.filesPerSecond < $1.filesPerSecond }! }
    static func median(_ s: [Sample]) -> Double {
        let v = s.map(\.filesPerSecond).sorted()
        return v.count % 2 == 1 ? v[v.count / 2] : (v[v.count / 2 - 1] + v[v.count / 2]) / 2
    }

    static func report(_ o: Options, variants: [Variant], native: [Sample], floor: [[Sample]], loads: (String, String)) {
        let n = Double(o.files)
        let nativeBest = best(native).filesPerSecond
        let nativeMicros = 1e6 / nativeBest
        // Requests per file, over every round of every variant (the same workload: the same counts).
        let all = zip(variants, floor).filter { !$0.0.coordfs }.flatMap { $0.1 }
        let perFile = FuseOperation.allCases.map { op in all.map { Double($0.requests[op.rawValue]) }.reduce(0, +) / (n * Double(all.count)) }
        let shown = FuseOperation.allCases.filter { perFile[$0.rawValue] >= 0.005 }
        print("## The kernel's floor: a FUSE daemon that does no work")
        print("")
        print("`coordfs-bench floor` (issue 23): how fast any FUSE daemon on this kernel and machine can serve the")
        print("smallfiles workload (`bench/smallfiles.py`, the program bench/run.sh runs: create 100 B + stat + unlink")
        print("of \(o.files) files). FuseKit's `FloorFileSystem`, mounted in the bench's process, answers at once:")
        print("no backing folder, no coordination, no log; \"no such name\" cached for 10 s and names and")
        print("attributes for 10 s (coordfs's lifetimes in a watched folder), xattrs ENODATA, no FLUSH at close, and")
        print("every create answered with one shared scratch backing file for kernel passthrough (as coordfs's")
        print("creates carry each file's own), so a write is no request. Native: the same program on a fresh ext4")
        print("image of its own each round (as bench/run.sh's), on the disk of \(o.dir); coordfs the same, as its backing")
        print("folder. Best of \(o.rounds) rounds (median in brackets), the order rotating each round. Transports:")
        print("`uring` (FUSE over io_uring) and `dev` (/dev/fuse); spin: FuseKit's default (\(defaultSpinMicroseconds) µs, adaptive, as coordfs's")
        print("`spin=`) or 0; \"one CPU\": every thread of the daemon and the tool on CPU 0 (a wake-up is local, no")
        print("IPI; the ring's queue for CPU 0 is the one used). Load average (1, 5, 15 min): \(loads.0) at the start,")
        print("\(loads.1) at the end (\(ProcessInfo.processInfo.activeProcessorCount) cores).")
        print("")
        print("The floor's requests per file (every floor row's rounds together, FuseKit's counters): " + shown.map { "\($0.name) \(String(format: "%.2f", perFile[$0.rawValue]))" }.joined(separator: ", ") + ".")
        print("Synchronous round trips per file (all but forget, release, releasedir): per row below.")
        print("")
        print("| target | transport in use | files/s | / native | µs per file | sync requests per file | µs per round trip | daemon CPU per request | context switches per file (daemon, tool) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        print("| native | - | \(String(format: "%.1f", nativeBest)) (\(String(format: "%.1f", median(native)))) | 1.00 | \(String(format: "%.1f", nativeMicros)) | - | - | - | -, \(String(format: "%.2f", Double(best(native).toolSwitches) / n)) |")
        var floorBest = 0.0, floorSync = 0.0
        for (v, samples) in zip(variants, floor) {
            let b = best(samples)
            let sync = Double(FuseOperation.allCases.filter { !asynchronous.contains($0) }.map { b.requests[$0.rawValue] }.reduce(0, +)) / n
            let requests = Double(b.requests.reduce(0, +))
            let micros = 1e6 / b.filesPerSecond
            if !v.coordfs, b.filesPerSecond > floorBest { floorBest = b.filesPerSecond; floorSync = sync }
            print("| \(v.name) | \(b.transport)\(b.passthrough ? "" : ", writes to the daemon") | \(String(format: "%.1f", b.filesPerSecond)) (\(String(format: "%.1f", median(samples)))) | "
                + "\(String(format: "%.2f", b.filesPerSecond / nativeBest)) | \(String(format: "%.1f", micros)) | \(String(format: "%.2f", sync)) | "
                + "\(String(format: "%.1f", micros / max(sync, 1))) | \(requests > 0 ? String(format: "%.1f µs", b.daemonCPU * 1e6 / requests) : "-") | "
                + "\(String(format: "%.2f", Double(b.daemonSwitches) / n)), \(String(format: "%.2f", Double(b.toolSwitches) / n)) |")
        }
        print("")
        let budget = 2 * nativeMicros
        print("What the targets need (issue 23: small files ≥ 0.50 of native): at most \(String(format: "%.1f", budget)) µs per file,")
        print("so at most \(String(format: "%.1f", budget / max(floorSync, 1))) µs per synchronous round trip with \(String(format: "%.2f", floorSync)) of them per file, the tool's own time")
        print("included. The fastest daemon that does nothing reached \(String(format: "%.2f", floorBest / nativeBest)) of native (\(String(format: "%.1f", 1e6 / floorBest)) µs per file,")
        print("\(String(format: "%.1f", 1e6 / floorBest / max(floorSync, 1))) µs per round trip): the target is \(floorBest / nativeBest >= 0.5 ? "within" : "beyond") this kernel's floor on this machine.")
        print("")
    }
}
