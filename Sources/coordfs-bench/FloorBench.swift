// The kernel's floor (issue 23): how fast can any FUSE daemon on this kernel and machine go, doing
// no work at all? `FuseKit.FloorFileSystem` (answers at once from an in-memory tree: no backing
// folder, no coordination, no log; data through kernel passthrough) mounted in this process on both
// transports, with FuseKit's default spin and with spin=0, and optionally with the whole daemon and
// the tool on one CPU; "floor+backing", the same daemon storing the files in a real backing folder on
// a fresh ext4 image as coordfs's (creates, unlinks, mkdirs, rmdirs, setattrs and renames made for
// real; lookups, getattrs and listings from its tree: smallfiles and tar only), both transports, both
// spins; then coordfs with its defaults (in-process, both transports) and the native folder, in one
// run, the order rotating each round. Workloads (issue 23's targets): smallfiles
// (`bench/smallfiles.py`, as bench/run.sh), tar unpack + delete of /usr/include (bench/run.sh's
// wl_tar), `ls -l` of an N-file folder and `grep -r` of a /usr/include copy (bench/run.sh kinds:
// once untimed to warm the caches, then timed). Prints, per workload, the time, the ratio to native,
// the requests per file (FuseKit's counters), the time per file and per synchronous round trip, the
// daemon's CPU per request and the context switches per file, and floor+backing's system calls on
// the backing folder per file; then what a daemon storing real files can reach, and coordfs's time
// per file beyond it.
// `coordfs-bench floor [--files N] [--lsl-files N] [--rounds N] [--dir DIR] [--no-pin] [--no-coordfs]
//  [--no-floor] [--no-backing] [--no-spin0] [--workloads smallfiles,tar,lsl,grep] [--script PATH]`
import CoordFS
import CURing
import Foundation
import FuseKit
import Glibc
import Synchronization

enum FloorBench {
    /// A workload of issue 23's targets.
    enum Workload: String, CaseIterable {
        case smallfiles, tar, lsl, grep
        /// Issue 23's target, as a fraction of native speed.
        var target: Double {
            switch self {
            case .smallfiles: 0.50
            case .tar: 0.33
            case .lsl: 0.50
            case .grep: 0.33
            }
        }
    }

    struct Options {
        var files = 10_000
        var lslFiles = 50_000
        var rounds = 2
        var dir = "/var/tmp"
        var pin = true
        var script: String? = nil
        var coordfs = true
        var backing = true
        var floor = true
        var spin0 = true
        var workloads: [Workload] = Workload.allCases
        mutating func parse(_ args: [String]) throws {
            var i = args.makeIterator()
            while let a = i.next() {
                switch a {
                case "--files": files = Int(i.next() ?? "") ?? files
                case "--lsl-files": lslFiles = max(1, Int(i.next() ?? "") ?? lslFiles)
                case "--rounds": rounds = max(1, Int(i.next() ?? "") ?? rounds)
                case "--dir": dir = i.next() ?? dir
                case "--no-pin": pin = false
                case "--no-coordfs": coordfs = false
                case "--no-backing": backing = false
                case "--no-floor": floor = false
                case "--no-spin0": spin0 = false
                case "--script": script = i.next()
                case "--workloads":
                    workloads = try (i.next() ?? "").split(separator: ",").map {
                        guard let w = Workload(rawValue: String($0)) else { throw MountBench.BenchError("unknown workload \($0)") }
                        return w
                    }
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
        /// The floor storing its files in a real backing folder (`FloorFileSystem(storingIn:)`).
        var backing = false
        var name: String {
            coordfs ? "coordfs (defaults), \(transport == .uring ? "uring" : "dev")"
                : "\(backing ? "floor+backing" : "floor"), \(transport == .uring ? "uring" : "dev"), spin=\(spin ? "\(FloorBench.defaultSpinMicroseconds)" : "0")\(pinned ? ", one CPU" : "")"
        }
        /// The workloads it runs: floor+backing only those that store files.
        func runs(_ w: Workload) -> Bool { !backing || FloorBench.storing.contains(w) }
    }

    /// One timed run of a workload.
    struct Sample {
        var seconds: Double
        /// Requests by `FuseOperation` (empty for native).
        var requests: [UInt64] = []
        var daemonCPU: Double = 0
        var daemonSwitches = 0
        var toolSwitches = 0
        var transport = ""
        var passthrough = false
        /// floor+backing: system calls made on the backing folder.
        var backingCalls = 0
    }

    /// What the workloads run on: the tarball, the script, and the trees of `ls -l` and `grep -r`.
    struct Setup {
        let script: String
        let tarball: String
        /// A folder holding `lsl` (N empty files) and `inc` (the tarball unpacked).
        let kinds: String
        let tarEntries: Int
        let grepFiles: Int
        let lslFiles: Int
        let smallFiles: Int
        func files(_ w: Workload) -> Int {
            switch w {
            case .smallfiles: smallFiles
            case .tar: tarEntries
            case .lsl: lslFiles
            case .grep: grepFiles
            }
        }
    }

    /// The workloads that make and remove files (floor+backing runs these).
    static let storing: Set<Workload> = [.smallfiles, .tar]

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
        for sub in ["/mnt", "/kinds"] { try FileManager.default.createDirectory(atPath: root + sub, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(atPath: root) }
        let scratch = open(root + "/scratch", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard scratch >= 0 else { throw MountBench.BenchError("cannot make the scratch backing file in \(o.dir)") }
        defer { close(scratch) }

        // The tarball of bench/run.sh's tar workload, and the request-kind trees (bench/run.sh kinds).
        let tarball = root + "/include.tar"
        _ = try MountBench.time("tar -C /usr -cf \(tarball) include", in: "/")
        let listing = try RequestsBench.shell("tar -tvf \(tarball)").split(separator: "\n")
        let kinds = root + "/kinds"
        if o.workloads.contains(.lsl) {
            _ = try MountBench.time("mkdir lsl && python3 -c \"import os\nfor i in range(\(o.lslFiles)): os.close(os.open('lsl/file-%06d' % i, os.O_CREAT | os.O_WRONLY, 0o644))\"", in: kinds)
        }
        if o.workloads.contains(.grep) { _ = try MountBench.time("mkdir inc && tar -C inc -xf \(tarball)", in: kinds) }
        sync()
        let setup = Setup(script: script, tarball: tarball, kinds: kinds, tarEntries: listing.count,
                          grepFiles: listing.filter { $0.hasPrefix("-") }.count, lslFiles: o.lslFiles, smallFiles: o.files)

        // FUSE over io_uring is offered only while enable_uring is Y (as bench/run.sh, put back after).
        let uringSwitch = "/sys/module/fuse/parameters/enable_uring"
        let uringWas = (try? String(contentsOfFile: uringSwitch, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        if uringWas == "N" { try? "Y".write(toFile: uringSwitch, atomically: false, encoding: .utf8) }
        defer { if uringWas == "N" { try? "N".write(toFile: uringSwitch, atomically: false, encoding: .utf8) } }

        var variants: [Variant] = []
        let spins = o.spin0 ? [true, false] : [true]
        for pinned in !o.floor ? [] : o.pin ? [false, true] : [false] {
            for transport in [FuseTransport.uring, .dev] {
                for spin in spins { variants.append(Variant(transport: transport, spin: spin, pinned: pinned)) }
            }
        }
        if o.backing, o.workloads.contains(where: storing.contains) {
            for transport in [FuseTransport.uring, .dev] {
                for spin in spins { variants.append(Variant(transport: transport, spin: spin, pinned: false, backing: true)) }
            }
        }
        if o.coordfs {
            for transport in [FuseTransport.uring, .dev] { variants.append(Variant(transport: transport, spin: true, pinned: false, coordfs: true)) }
        }
        let load0 = loadAverage()
        let started = Date()
        var native: [Workload: [Sample]] = [:]
        var floor: [[Workload: [Sample]]] = Array(repeating: [:], count: variants.count)
        let targets = variants.count + 1
        for r in 0..<o.rounds {
            for i in 0..<targets {
                let t = (i + r) % targets
                let got: [Workload: Sample]
                if t == variants.count {
                    got = try nativeRun(o.workloads, setup, root: root, round: r)
                } else if variants[t].coordfs {
                    got = try coordfsRun(o.workloads, setup, variants[t].transport, root: root, round: r)
                } else if variants[t].backing {
                    got = try backedRun(variants[t], o.workloads.filter(variants[t].runs), setup, root: root, round: r)
                } else {
                    got = try mounted(variants[t], o.workloads, setup, scratch: scratch, at: root + "/mnt")
                }
                for (w, s) in got {
                    if t == variants.count { native[w, default: []].append(s) } else { floor[t][w, default: []].append(s) }
                }
            }
        }
        report(o, setup, variants: variants, native: native, floor: floor, loads: (load0, loadAverage()), seconds: Date().timeIntervalSince(started))
    }

    // MARK: running

    /// Runs `workloads` through `mountpoint` (the floor or coordfs, or a native folder when
    /// `counters` is nil): smallfiles and tar in new folders there, `ls -l` and `grep -r` of the
    /// trees at `trees` (a path under the mount showing `Setup.kinds`), once untimed, then timed.
    static func runWorkloads(_ workloads: [Workload], _ setup: Setup, in dir: String, trees: String, pinned: Bool,
                             counters: FuseRequestCounters?, fresh: ((Workload, (String) throws -> Sample) throws -> Sample)? = nil) throws -> [Workload: Sample] {
        func snapshot() -> [UInt64] { counters.map { c in FuseOperation.allCases.map { c.value($0) } } ?? [] }
        var out: [Workload: Sample] = [:]
        for w in workloads {
            var before: [UInt64] = []
            let counted: (String) throws -> Sample = { d in
                switch w {
                case .smallfiles:
                    before = snapshot()
                    return try measure(["python3", setup.script, d + "/small", "\(setup.smallFiles)"], pinned: pinned) { output in
                        Double(output.trimmingCharacters(in: .whitespacesAndNewlines)).map { Double(setup.smallFiles) / $0 }
                    }
                case .tar:
                    before = snapshot()
                    return try measure(["sh", "-c", "mkdir '\(d)/tree' && tar -C '\(d)/tree' -xf '\(setup.tarball)' && rm -rf '\(d)/tree'"], pinned: pinned)
                case .lsl, .grep:
                    // Once untimed (caches warm, as bench/run.sh kinds), then timed and counted.
                    let argv = w == .lsl ? ["ls", "-l", trees + "/lsl"]
                        : ["grep", "-r", "-l", "--binary-files=text", "coordfs-bench: no such text", trees + "/inc"]
                    let ok: Int32 = w == .grep ? 1 : 0   // grep: 1, no match
                    _ = try measure(argv, pinned: pinned, okStatus: ok)
                    usleep(100_000)
                    before = snapshot()
                    return try measure(argv, pinned: pinned, okStatus: ok)
                }
            }
            var sample = try fresh.map { try $0(w, counted) } ?? counted(dir)
            if counters != nil {
                usleep(200_000)   // late RELEASEs and FORGETs
                sample.requests = zip(snapshot(), before).map { $0 - $1 }
            }
            out[w] = sample
        }
        return out
    }

    static func nativeRun(_ workloads: [Workload], _ setup: Setup, root: String, round: Int) throws -> [Workload: Sample] {
        try runWorkloads(workloads, setup, in: root, trees: setup.kinds, pinned: false, counters: nil) { w, body in
            // smallfiles and tar each on a fresh ext4 file system, as bench/run.sh's rounds.
            if w == .lsl || w == .grep { return try body(setup.kinds) }
            return try onFreshFileSystem(root + "/native-\(round)-\(w.rawValue)") { try body($0) }
        }
    }

    /// Mounts a `FloorFileSystem` for `variant` at `mountpoint` (the request-kind trees mirrored at
    /// its root), runs the workloads through it, and unmounts (always).
    static func mounted(_ variant: Variant, _ workloads: [Workload], _ setup: Setup, scratch: Int32, at mountpoint: String) throws -> [Workload: Sample] {
        let fs = FloorFileSystem(scratchBacking: scratch, mirroring: setup.kinds)
        var got = try floorMounted(variant, fs, at: mountpoint) { session in
            try runWorkloads(workloads, setup, in: mountpoint, trees: mountpoint, pinned: variant.pinned, counters: session.requestCounters)
        }
        for w in got.keys where w == .grep { got[w]!.passthrough = got[w]!.passthrough || fs.mirroredPassthroughOpens > 0 }
        return got
    }

    /// floor+backing: each workload on a fresh ext4 file system of its own (as coordfs's backing
    /// folder and native's), the floor storing its files in a folder there; afterwards the backing
    /// folder must be empty again (each workload removes what it made) and calls must have been made.
    static func backedRun(_ variant: Variant, _ workloads: [Workload], _ setup: Setup, root: String, round: Int) throws -> [Workload: Sample] {
        var out: [Workload: Sample] = [:]
        for w in workloads {
            let one = try onFreshFileSystem(root + "/fb-\(round)-\(w.rawValue)") { folder -> [Workload: Sample] in
                for sub in ["/backing", "/mnt"] { try FileManager.default.createDirectory(atPath: folder + sub, withIntermediateDirectories: true) }
                let fs = try FloorFileSystem(storingIn: folder + "/backing")
                let before = fs.backingSystemCalls
                var got = try floorMounted(variant, fs, at: folder + "/mnt") { session in
                    try runWorkloads([w], setup, in: folder + "/mnt", trees: folder + "/mnt", pinned: variant.pinned, counters: session.requestCounters)
                }
                let left = (try? FileManager.default.contentsOfDirectory(atPath: folder + "/backing")) ?? ["?"]
                guard left.isEmpty, fs.backingSystemCalls > before else {
                    throw MountBench.BenchError("floor+backing: \(w.rawValue) left \(left.prefix(3)) in the backing folder after \(fs.backingSystemCalls - before) calls")
                }
                got[w]?.backingCalls = fs.backingSystemCalls - before
                fs.closeFolders()   // before the image is unmounted
                return got
            }
            out.merge(one) { a, _ in a }
        }
        return out
    }

    /// Mounts `fs` for `variant` at `mountpoint`, runs `body` with the session, and unmounts (always).
    static func floorMounted(_ variant: Variant, _ fs: FloorFileSystem, at mountpoint: String,
                             _ body: (FuseSession) throws -> [Workload: Sample]) throws -> [Workload: Sample] {
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
        usleep(100_000)
        var got = try body(session)
        for w in got.keys {
            got[w]!.transport = session.transportInUse == .uring ? "io_uring" : "/dev/fuse"
            got[w]!.passthrough = fs.writesPassThrough
        }
        return got
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

    /// The workloads through coordfs with its defaults (coordination, event log, store, backing
    /// watcher, passthrough) and `-o transport=`, in-process mounts as `coordfs-bench requests`'s:
    /// smallfiles and tar each on a fresh backing file system, `ls -l` and `grep -r` on a mount of
    /// the request-kind trees' folder.
    static func coordfsRun(_ workloads: [Workload], _ setup: Setup, _ transport: FuseTransport, root: String, round: Int) throws -> [Workload: Sample] {
        var out: [Workload: Sample] = [:]
        for w in workloads {
            let one: [Workload: Sample]
            if w == .lsl || w == .grep {
                try FileManager.default.createDirectory(atPath: root + "/cfmnt", withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(atPath: root + "/cfmnt") }
                one = try coordfsMounted(transport, backing: setup.kinds, at: root + "/cfmnt") { mnt, counters in
                    try runWorkloads([w], setup, in: mnt, trees: mnt, pinned: false, counters: counters)
                }
            } else {
                one = try onFreshFileSystem(root + "/cf-\(round)-\(w.rawValue)") { folder in
                    for sub in ["/backing", "/mnt"] { try FileManager.default.createDirectory(atPath: folder + sub, withIntermediateDirectories: true) }
                    return try coordfsMounted(transport, backing: folder + "/backing", at: folder + "/mnt") { mnt, counters in
                        try runWorkloads([w], setup, in: mnt, trees: mnt, pinned: false, counters: counters)
                    }
                }
            }
            out.merge(one) { a, _ in a }
        }
        return out
    }

    static func coordfsMounted(_ transport: FuseTransport, backing: String, at mountpoint: String,
                               _ body: (String, FuseRequestCounters) throws -> [Workload: Sample]) throws -> [Workload: Sample] {
        var options = try MountOptions.parse([])
        options.transport = transport
        let daemon = try Daemon(plan: MountPreflight.plan(backing: backing, mountpoint: mountpoint, options: options))
        try daemon.startInProcess()
        defer { daemon.stopAndWait() }
        guard let counters = daemon.requestCounters else { throw MountBench.BenchError("the coordfs mount has no request counters") }
        usleep(100_000)
        var got = try body(mountpoint, counters)
        for w in got.keys {
            got[w]!.transport = daemon.transportInUse.map { $0 == .uring ? "io_uring" : "/dev/fuse" } ?? "?"
            got[w]!.passthrough = true
        }
        return got
    }

    /// Runs `argv` (on CPU 0 when `pinned`) and returns its seconds (wall clock, or what `seconds`
    /// reads from its output), with this process's CPU time and context switches over it (the
    /// daemon's, when mounted here) and the tool's.
    static func measure(_ argv: [String], pinned: Bool, okStatus: Int32 = 0, seconds: ((String) -> Double?)? = nil) throws -> Sample {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: pinned ? "/usr/bin/taskset" : "/usr/bin/env")
        p.arguments = (pinned ? ["-c", "0"] : []) + argv
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        let self0 = usage(RUSAGE_SELF), children0 = usage(RUSAGE_CHILDREN)
        let start = Date()
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let wall = Date().timeIntervalSince(start)
        let self1 = usage(RUSAGE_SELF), children1 = usage(RUSAGE_CHILDREN)
        guard p.terminationStatus <= okStatus else { throw MountBench.BenchError("`\(argv.joined(separator: " "))` failed (status \(p.terminationStatus))") }
        var s = wall
        if let seconds {
            guard let got = seconds(String(decoding: data, as: UTF8.self)) else { throw MountBench.BenchError("`\(argv.joined(separator: " "))` printed no rate") }
            s = got
        }
        return Sample(seconds: s, daemonCPU: self1.cpu - self0.cpu, daemonSwitches: self1.switches - self0.switches,
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

    static func best(_ s: [Sample]) -> Sample { s.min { $0.seconds < $1.seconds }! }
    static func median(_ s: [Sample]) -> Double {
        let v = s.map(\.seconds).sorted()
        return v.count % 2 == 1 ? v[v.count / 2] : (v[v.count / 2 - 1] + v[v.count / 2]) / 2
    }
    static func f(_ x: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", x) }

    static func title(_ w: Workload, _ setup: Setup) -> String {
        switch w {
        case .smallfiles: "smallfiles: create (100 B) + stat + unlink of \(setup.smallFiles) files (`bench/smallfiles.py`)"
        case .tar: "tar: unpack + delete of /usr/include (\(setup.tarEntries) entries; bench/run.sh's `tar` workload)"
        case .lsl: "`ls -l` of a \(setup.lslFiles)-file folder (warm: run once untimed just before)"
        case .grep: "`grep -r` of a /usr/include copy (\(setup.grepFiles) files; warm)"
        }
    }

    static func requestLine(_ samples: [Sample], files: Double) -> String {
        let perFile = FuseOperation.allCases.map { op in samples.map { Double($0.requests[op.rawValue]) }.reduce(0, +) / (files * Double(samples.count)) }
        let shown = FuseOperation.allCases.filter { perFile[$0.rawValue] >= 0.005 }
        return "\(f(perFile.reduce(0, +))): " + shown.map { "\($0.name) \(f(perFile[$0.rawValue]))" }.joined(separator: ", ")
    }

    static func report(_ o: Options, _ setup: Setup, variants: [Variant], native: [Workload: [Sample]], floor: [[Workload: [Sample]]],
                       loads: (String, String), seconds: Double) {
        print("## The kernel's floor: a FUSE daemon that does no work")
        print("")
        print("`coordfs-bench floor` (issue 23): how fast any FUSE daemon on this kernel and machine can serve each workload")
        print("of issue 23's targets. FuseKit's `FloorFileSystem`, mounted in the bench's process, answers at once from an")
        print("in-memory tree: no backing folder, no coordination, no log; names, attributes and \"no such name\" cached")
        print("for 10 s (coordfs's lifetimes in a watched folder), the INIT capabilities coordfs takes on a single-user")
        print("mount, xattrs ENODATA, listings READDIRPLUS, no FLUSH at close; a file made through it is opened with one")
        print("shared scratch backing file for kernel passthrough (as coordfs's creates carry each file's own: a write is")
        print("no request), and the `ls -l` and `grep -r` trees are mirrored from the folder the native runs use, each")
        print("file opened with its real file as backing file, registered at its first open and kept (as coordfs keeps a")
        print("node's), so a warm open is an answer without a system call. Native: smallfiles and tar on a fresh ext4")
        print("image of their own each round (as bench/run.sh's), on the disk of \(o.dir); coordfs (in-process, its defaults)")
        print("the same as its backing folder, and `ls -l` and `grep -r` on the same trees as native. Best of \(o.rounds)")
        print("rounds (median in brackets), the order rotating each round. Transports: `uring` (FUSE over io_uring) and")
        print("`dev` (/dev/fuse); spin: FuseKit's default (\(defaultSpinMicroseconds) µs, adaptive, as coordfs's `spin=`) or 0; \"one CPU\": every")
        print("thread of the daemon and the tool on CPU 0. \"floor+backing\" (smallfiles and tar): the same daemon, but storing the files")
        print("in a real backing folder on a fresh ext4 image of its own each round, as coordfs's: create is openat(O_CREAT|O_EXCL) of")
        print("the real file, its descriptor the passthrough backing file (registered at the open, its id closed with the descriptor at")
        print("release), unlink and rmdir unlinkat, mkdir mkdirat (and an O_PATH open of the new folder), setattr fchmodat,")
        print("fchownat, utimensat, rename renameat2, each relative to its folder's descriptor; lookups, getattrs and listings")
        print("answered from its tree, except the size and times of a file written since it looked (fstat or fstatat: a passthrough write does not pass the daemon); the backing")
        print("folder is checked empty after each run. What it costs above the floor is what storing real files costs any daemon;")
        print("what coordfs costs above it is coordfs's own work. Load average (1, 5, 15 min): \(loads.0) at the start, \(loads.1)")
        print("at the end (\(ProcessInfo.processInfo.activeProcessorCount) cores); \(Int(seconds)) s in all.")
        print("")
        for w in o.workloads {
            guard let nat = native[w], !nat.isEmpty else { continue }
            let n = Double(setup.files(w))
            let nativeBest = best(nat).seconds
            let nativeMicros = nativeBest * 1e6 / n
            print("**\(title(w, setup))**; issue 23's target ≥ \(f(w.target)) of native.")
            print("")
            let floorSamples = zip(variants, floor).filter { !$0.0.coordfs && !$0.0.backing }.flatMap { $0.1[w] ?? [] }
            let backingSamples = zip(variants, floor).filter { $0.0.backing }.flatMap { $0.1[w] ?? [] }
            let coordfsSamples = zip(variants, floor).filter { $0.0.coordfs }.flatMap { $0.1[w] ?? [] }
            if !floorSamples.isEmpty { print("Requests per file, the floor (every floor row's rounds): " + requestLine(floorSamples, files: n) + ".") }
            if !backingSamples.isEmpty {
                print("Requests per file, floor+backing (every floor+backing row's rounds): " + requestLine(backingSamples, files: n) + ".")
                let calls = Double(backingSamples.map(\.backingCalls).reduce(0, +)) / (n * Double(backingSamples.count))
                print("System calls on the backing folder per file, floor+backing: \(f(calls)) (backing-file registrations and closes included).")
            }
            if !coordfsSamples.isEmpty { print("Requests per file, coordfs (both transports' rounds): " + requestLine(coordfsSamples, files: n) + ".") }
            print("")
            print("| target | transport in use | seconds | / native | µs per file | sync requests per file | µs per round trip | daemon CPU per request | context switches per file (daemon, tool) |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            print("| native | - | \(f(nativeBest, 3)) (\(f(median(nat), 3))) | 1.00 | \(f(nativeMicros, 1)) | - | - | - | -, \(f(Double(best(nat).toolSwitches) / n)) |")
            var floorBest = Double.infinity, floorSync = 0.0
            var backingBest: [FuseTransport: Double] = [:], backingSpinBest: [FuseTransport: Double] = [:], coordfsBest: [FuseTransport: Double] = [:]
            for (v, all) in zip(variants, floor) {
                guard let samples = all[w], !samples.isEmpty else { continue }
                let b = best(samples)
                let sync = Double(FuseOperation.allCases.filter { !asynchronous.contains($0) }.map { b.requests[$0.rawValue] }.reduce(0, +)) / n
                let requests = Double(b.requests.reduce(0, +))
                let micros = b.seconds * 1e6 / n
                if !v.coordfs, !v.backing, b.seconds < floorBest { floorBest = b.seconds; floorSync = sync }
                if v.backing { backingBest[v.transport] = min(backingBest[v.transport] ?? .infinity, b.seconds) }
                if v.backing, v.spin { backingSpinBest[v.transport] = b.seconds }
                if v.coordfs { coordfsBest[v.transport] = b.seconds }
                print("| \(v.name) | \(b.transport)\(b.passthrough ? "" : ", data through the daemon") | \(f(b.seconds, 3)) (\(f(median(samples), 3))) | "
                    + "\(f(nativeBest / b.seconds)) | \(f(micros, 1)) | \(f(sync)) | "
                    + "\(f(micros / max(sync, 0.01), 1)) | \(requests > 0 ? f(b.daemonCPU * 1e6 / requests, 1) + " µs" : "-") | "
                    + "\(f(Double(b.daemonSwitches) / n)), \(f(Double(b.toolSwitches) / n)) |")
            }
            print("")
            if floorBest.isFinite {
                let budget = nativeMicros / w.target
                let floorMicros = floorBest * 1e6 / n
                print("The target allows \(f(budget, 1)) µs per file (native's \(f(nativeMicros, 1)) / \(f(w.target))), so \(f(budget / max(floorSync, 0.01), 1)) µs per synchronous")
                print("round trip at the floor's \(f(floorSync)) per file, the tool's own time included. The fastest daemon that does nothing")
                print("took \(f(floorMicros, 1)) µs per file (\(f(floorMicros / max(floorSync, 0.01), 1)) µs per round trip), \(f(nativeBest / floorBest)) of native: the target is "
                    + "\(nativeBest / floorBest >= w.target ? "within" : "beyond") this kernel's floor on this machine"
                    + "\(nativeBest / floorBest >= w.target ? ", leaving \(f(budget - floorMicros, 1)) µs per file for a daemon's own work" : "").")
                print("")
            }
            if let storedBest = backingBest.values.min() {
                let budget = nativeMicros / w.target
                let storedMicros = storedBest * 1e6 / n
                let reachable = nativeBest / storedBest >= w.target
                print("**A daemon that stores real files** (floor+backing, its fastest row): \(f(storedMicros, 1)) µs per file, \(f(nativeBest / storedBest)) of native"
                    + (floorBest.isFinite ? ", \(f(storedMicros - floorBest * 1e6 / n, 1)) µs per file above the floor" : "")
                    + ": the target (\(f(budget, 1)) µs per file) is \(reachable ? "reachable" : "not reachable") for such a daemon on this machine in this run"
                    + (reachable ? ", leaving \(f(budget - storedMicros, 1)) µs per file for its own work." : "."))
                for transport in [FuseTransport.uring, .dev] {
                    guard let c = coordfsBest[transport], let b = backingSpinBest[transport] else { continue }
                    let name = transport == .uring ? "uring" : "dev"
                    print("coordfs (\(name)) took \(f(c * 1e6 / n, 1)) µs per file, \(f((c - b) * 1e6 / n, 1)) µs per file beyond floor+backing (\(name), spin=\(defaultSpinMicroseconds), its spin); "
                        + "the target needs coordfs at \(f(budget, 1)), \(f(max(0, (c * 1e6 / n) - budget), 1)) µs per file less.")
                }
                print("")
            }
        }
    }
}
