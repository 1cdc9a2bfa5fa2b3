// `coordfs mount` / `coordfs unmount` through the real binary: refused mounts leave nothing
// mounted, a stale mount is cleaned up by the next mount, SIGTERM unmounts, `-o ro` is read-only.
import Foundation
import Glibc
import Linux
import TestSupport
import XCTest

final class MountCommandTests: MountTestCase {
    override var mountsInSetUp: Bool { false }
    override var comparesTreesAtEnd: Bool { false }

    private var binary: String = ""

    override func setUpWithError() throws {
        guard try MountTarget.fromEnvironment().isCoordFS else { throw XCTSkip("coordfs-specific: COORDFS_MOUNT_TARGET is not coordfs") }
        try super.setUpWithError()
        binary = try MountTarget.coordfsBinary()
    }

    @discardableResult
    private func coordfs(_ args: String...) -> CommandResult { Spawn.run(binary, args, timeout: 60) }

    private func assertNotMounted(_ path: String, _ context: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(Mounts.isMounted(path), "\(context): \(path) is mounted", file: file, line: line)
    }

    private func daemon(of mountpoint: String) -> pid_t? {
        Mounts.daemons(servingPath: mountpoint, programs: ["coordfs"]).first
    }

    func testUnknownOptionIsRefusedClearly() {
        let r = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other,frobnicate")
        XCTAssertNotEqual(r.status, 0, "an unknown -o option was accepted: \(r)")
        XCTAssertTrue(r.output.contains("frobnicate"), "the error does not name the unknown option: \(r)")
        assertNotMounted(fixture.mountpoint, "after a refused option")
        let bad = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "max_threads=0")
        XCTAssertNotEqual(bad.status, 0, "max_threads=0 was accepted: \(bad)")
        assertNotMounted(fixture.mountpoint, "after a bad option value")
        for value in ["-1", "fast", "100001"] {
            let spin = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "spin=\(value)")
            XCTAssertNotEqual(spin.status, 0, "spin=\(value) was accepted: \(spin)")
            XCTAssertTrue(spin.output.contains("spin=\(value)") && spin.output.contains("microseconds"), "\(spin)")
            assertNotMounted(fixture.mountpoint, "after spin=\(value)")
        }
        let adapt = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "spin_adapt=maybe")
        XCTAssertNotEqual(adapt.status, 0, "spin_adapt=maybe was accepted: \(adapt)")
        XCTAssertTrue(adapt.output.contains("spin_adapt=maybe") && adapt.output.contains("on or off"), "\(adapt)")
        assertNotMounted(fixture.mountpoint, "after spin_adapt=maybe")
    }

    /// Values past an option's range (which once overflowed in the daemon: "daemon did not come up")
    /// are refused by `coordfs mount` with a message naming the option and its range, exit status 1,
    /// nothing mounted, no daemon started; the daemon's own parse (`-f`, what a background mount
    /// runs) refuses them the same way.
    func testOutOfRangeNumericOptionsAreRefusedWithTheirRange() {
        let cases: [(option: String, range: String)] = [
            ("log_max_mb=17592186044416", "1 to 16777216 MiB"),
            ("log_max_mb=18446744073709551615", "1 to 16777216 MiB"),
            ("log_max_mb=0", "1 to 16777216 MiB"),
            ("log_max_days=inf", "at most 36500 days"),
            ("log_max_days=1e300", "at most 36500 days"),
            ("log_max_days=nan", "at most 36500 days"),
            ("log_max_days=-1", "at most 36500 days"),
            ("max_read=99999999999", "1 to 2147483647 bytes"),
            ("ask_timeout=1e300", "0 to 86400"),
            ("attr_timeout=inf", "0 to 86400"),
            ("keep_mb=9223372036854775807", "1 to 1099511627776 MiB"),
            ("keep_versions=1e9", "1 to 100000"),
            ("max_threads=4294967297", "1 to 1024"),
            ("log_user_share=0", "1 to 100 percent of log_max_mb"),
            ("log_user_share=101", "1 to 100 percent of log_max_mb"),
            ("log_user_share=-5", "1 to 100 percent of log_max_mb"),
            ("log_user_share=ten", "1 to 100 percent of log_max_mb"),
            ("log_summary_interval=0", "1 to 3600 seconds"),
            ("log_summary_interval=3601", "1 to 3600 seconds"),
        ]
        for (option, range) in cases {
            for foreground in [false, true] {
                var args = ["mount", fixture.backing, fixture.mountpoint, "-o", option]
                if foreground { args.append("-f") }
                let r = Spawn.run(binary, args, timeout: 60)
                let how = foreground ? "\(option) -f" : option
                XCTAssertEqual(r.status, 1, "\(how) was not refused with status 1: \(r)")
                XCTAssertTrue(r.output.contains("bad mount option '\(option)'") && r.output.contains(range),
                              "\(how): the message does not name the option and its range (\(range)): \(r)")
                XCTAssertFalse(r.output.contains("did not come up") || r.output.contains("Fatal error"), "\(how): \(r)")
                assertNotMounted(fixture.mountpoint, "after \(how)")
                XCTAssertNil(daemon(of: fixture.mountpoint), "\(how): a daemon is running")
            }
        }
        // Nothing was started: no state folder, so no daemon log either.
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.backing + "/.coordfs/daemon.log"))
        // The largest values in range mount and work.
        let r = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "log_max_mb=16777216,log_max_days=36500,ask_timeout=86400,log_user_share=100,log_summary_interval=3600")
        XCTAssertEqual(r.status, 0, "the largest values in range were refused: \(r)")
        XCTAssertTrue(Mounts.isMounted(fixture.mountpoint))
        XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)
    }

    func testMountpointInsideBackingIsRefused() {
        mkdir(fixture.backing + "/inner", 0o755)
        let r = coordfs("mount", fixture.backing, fixture.backing + "/inner")
        XCTAssertNotEqual(r.status, 0, "mounting inside the backing folder was accepted: \(r)")
        XCTAssertFalse(r.output.isEmpty, "no message for a mountpoint inside backing")
        assertNotMounted(fixture.backing + "/inner", "mountpoint inside backing")
        let same = coordfs("mount", fixture.backing, fixture.backing)
        XCTAssertNotEqual(same.status, 0, "mounting backing onto itself was accepted: \(same)")
        assertNotMounted(fixture.backing, "backing onto itself")
    }

    func testMissingFoldersAreRefused() {
        let r1 = coordfs("mount", fixture.root + "/nope", fixture.mountpoint)
        XCTAssertNotEqual(r1.status, 0, "a missing backing folder was accepted: \(r1)")
        XCTAssertTrue(r1.output.contains("nope"), "the error does not name the missing folder: \(r1)")
        assertNotMounted(fixture.mountpoint, "missing backing")
        let r2 = coordfs("mount", fixture.backing, fixture.root + "/nomnt")
        XCTAssertNotEqual(r2.status, 0, "a missing mountpoint was accepted: \(r2)")
        assertNotMounted(fixture.root + "/nomnt", "missing mountpoint")
        _ = Sys.put(fixture.root + "/file", [1])
        let r3 = coordfs("mount", fixture.root + "/file", fixture.mountpoint)
        XCTAssertNotEqual(r3.status, 0, "a file as backing was accepted: \(r3)")
        assertNotMounted(fixture.mountpoint, "file as backing")
    }

    func testMountingTwiceIsRefusedAndUnmountWorks() throws {
        let first = coordfs("mount", fixture.backing, fixture.mountpoint)
        XCTAssertEqual(first.status, 0, "mount: \(first)")
        XCTAssertTrue(Mounts.isMounted(fixture.mountpoint))
        XCTAssertEqual(Sys.put(fixture.mountpoint + "/f", [1, 2]), .success())
        let second = coordfs("mount", fixture.backing, fixture.mountpoint)
        XCTAssertNotEqual(second.status, 0, "a second mount on the same mountpoint was accepted: \(second)")
        XCTAssertEqual(Mounts.list().filter { $0.mountpoint == fixture.mountpoint }.count, 1, "mounts stacked on \(fixture.mountpoint)")
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/f").0, [1, 2], "the first mount stopped working")
        let pid = daemon(of: fixture.mountpoint)
        XCTAssertNotNil(pid, "no daemon process found for the mount")
        let u = coordfs("unmount", fixture.mountpoint)
        XCTAssertEqual(u.status, 0, "unmount: \(u)")
        assertNotMounted(fixture.mountpoint, "after coordfs unmount")
        if let pid { MountedFolder.reap([pid]); XCTAssertFalse(Mounts.isAlive(pid), "the daemon outlived its unmount") }
        let again = coordfs("unmount", fixture.mountpoint)
        XCTAssertNotEqual(again.status, 0, "unmounting something not mounted succeeded: \(again)")
        XCTAssertEqual(Sys.contents(fixture.backing + "/f").0, [1, 2], "data written through the mount is not in backing")
    }

    /// A mount held for a moment (another process passing through it) is unmounted once it is let go;
    /// one held on is refused as busy, clearly, and stays mounted and working.
    func testUnmountWaitsOutAMomentaryHoldButRefusesAnOpenFile() throws {
        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
        XCTAssertEqual(Sys.put(fixture.mountpoint + "/f", [1]), .success())
        // Held throughout: busy, exit 1, still mounted and serving.
        let held = open(fixture.mountpoint + "/f", O_RDONLY | O_CLOEXEC)  // not inherited by coordfs unmount
        XCTAssertGreaterThanOrEqual(held, 0)
        let busy = coordfs("unmount", fixture.mountpoint)
        XCTAssertEqual(busy.status, 1, "unmount of a mount with an open file: \(busy)")
        XCTAssertTrue(busy.output.contains("busy"), "the refusal does not say busy: \(busy)")
        XCTAssertTrue(Mounts.isMounted(fixture.mountpoint), "a refused unmount unmounted")
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/f").0, [1], "the mount stopped serving after a refused unmount")
        // Let go 150 ms into the unmount: it goes through.
        let pid = daemon(of: fixture.mountpoint)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.15) { close(held) }
        let u = coordfs("unmount", fixture.mountpoint)
        XCTAssertEqual(u.status, 0, "unmount while a file was closed 150 ms into it: \(u)")
        assertNotMounted(fixture.mountpoint, "after the hold was let go")
        if let pid { MountedFolder.reap([pid]); XCTAssertFalse(Mounts.isAlive(pid), "the daemon outlived its unmount") }
    }

    /// `coordfs unmount M && umount FS`: when unmount returns, the daemon holds no file in BACKING's
    /// file system (its log, store and watcher), so that file system can be unmounted at once.
    func testAfterUnmountReturnsTheBackingFileSystemIsFree() throws {
        let fs = fixture.root + "/fs"
        mkdir(fs, 0o755)
        guard Glibc.mount("tmpfs", fs, "tmpfs", 0, nil) == 0 else { throw XCTSkip("cannot mount a tmpfs: \(String(cString: strerror(errno)))") }
        var mounted = true
        defer { if mounted { umount2(fs, Int32(MNT_DETACH)) } }
        for round in 0..<5 {
            let backing = fs + "/backing"
            mkdir(backing, 0o755)
            let m = coordfs("mount", backing, fixture.mountpoint)
            XCTAssertEqual(m.status, 0, "mount: \(m)")
            for i in 0..<20 { XCTAssertEqual(Sys.put(fixture.mountpoint + "/f\(i)", [UInt8(i)]), .success()) }
            let u = coordfs("unmount", fixture.mountpoint)
            XCTAssertEqual(u.status, 0, "unmount: \(u)")
            guard umount2(fs, 0) == 0 else {
                return XCTFail("round \(round): the backing file system is still busy after coordfs unmount: \(String(cString: strerror(errno)))")
            }
            guard Glibc.mount("tmpfs", fs, "tmpfs", 0, nil) == 0 else { mounted = false; return XCTFail("remount tmpfs") }
        }
    }

    /// The background daemon is a program of its own (exec'd, in its own session, stdin /dev/null),
    /// not a fork of `coordfs mount`: in a forked child the Swift runtime's once-locks carry the
    /// parent's thread id, and the daemon could spin forever at full CPU once two threads met on one
    /// (seen at unmount). Every one of many mount/unmount cycles ends with the daemon gone.
    func testTheBackgroundDaemonIsANewProgramAndEndsAtEveryUnmount() throws {
        for round in 0..<30 {
            let options = ["", "coordination=off,log=off", "log=off", "store=off", "spin=0"][round % 5]
            let m = options.isEmpty ? coordfs("mount", fixture.backing, fixture.mountpoint)
                : coordfs("mount", fixture.backing, fixture.mountpoint, "-o", options)
            guard m.status == 0 else { return XCTFail("round \(round): mount -o '\(options)': \(m)") }
            guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("round \(round): no daemon process found") }
            if round == 0 {
                let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
                let fields = stat[(stat.lastIndex(of: ")").map { stat.index($0, offsetBy: 2) } ?? stat.startIndex)...].split(separator: " ")
                XCTAssertEqual(fields.count > 3 ? pid_t(fields[3]) : nil, pid, "the daemon does not lead a session of its own: \(stat)")
                let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
                let args = cmdline.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
                XCTAssertTrue(args.contains("-f") && args.contains("--ready-fd"), "the daemon is not an exec'd foreground daemon: \(args)")
                XCTAssertEqual(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/0"), "/dev/null", "the daemon's stdin is not /dev/null")
            }
            for i in 0..<10 { XCTAssertEqual(Sys.put(fixture.mountpoint + "/f\(i)", [UInt8(i)]), .success()) }
            let u = coordfs("unmount", fixture.mountpoint)
            XCTAssertEqual(u.status, 0, "round \(round): unmount -o '\(options)': \(u)")
            MountedFolder.reap([pid])
            if Mounts.isAlive(pid) { return XCTFail("round \(round): the daemon outlived its unmount") }
        }
    }

    func testStaleMountIsCleanedUpByTheNextMount() throws {
        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
        guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("no daemon process found for the mount") }
        XCTAssertEqual(Sys.put(fixture.mountpoint + "/kept", [7]), .success())
        kill(pid, SIGKILL)
        MountedFolder.reap([pid])
        // The kernel says ENOTCONN, or ECONNABORTED once it aborted the connection, or (through
        // io_uring, until the dead daemon's ring is torn down) ECANCELED: all are stale.
        let dead = Sys.stat(fixture.mountpoint).1
        XCTAssertTrue(dead == .failure(ENOTCONN) || dead == .failure(ECONNABORTED) || dead == .failure(ECANCELED),
                      "after kill -9 the mountpoint should be dead, got \(dead)")
        let r = coordfs("mount", fixture.backing, fixture.mountpoint)
        XCTAssertEqual(r.status, 0, "mount over a stale mount failed: \(r)")
        XCTAssertEqual(Mounts.list().filter { $0.mountpoint == fixture.mountpoint }.count, 1, "the stale mount is still stacked under the new one")
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/kept").0, [7], "the new mount does not serve the backing folder")
        // `coordfs unmount` also clears a stale mount.
        if let pid2 = daemon(of: fixture.mountpoint) {
            kill(pid2, SIGKILL)
            MountedFolder.reap([pid2])
            let u = coordfs("unmount", fixture.mountpoint)
            XCTAssertEqual(u.status, 0, "coordfs unmount of a stale mount: \(u)")
            assertNotMounted(fixture.mountpoint, "unmount of a stale mount")
        }
    }

    /// Right after its daemon died the kernel still answers stat(2) of the mountpoint from cached
    /// attributes: the next mount and `coordfs unmount` must see the mount as dead all the same.
    func testAMountWhoseDaemonJustDiedIsStaleAtOnce() throws {
        for round in 0..<3 {
            XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
            guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("no daemon process found for the mount") }
            XCTAssertEqual(Sys.put(fixture.mountpoint + "/f\(round)", [1]), .success())
            XCTAssertNotNil(Sys.stat(fixture.mountpoint).0, "the live mount's root")
            kill(pid, SIGKILL)
            MountedFolder.reap([pid])
            let r = round == 2 ? coordfs("unmount", fixture.mountpoint) : coordfs("mount", fixture.backing, fixture.mountpoint)
            XCTAssertEqual(r.status, 0, "round \(round): over a mount whose daemon just died: \(r)")
            XCTAssertEqual(Mounts.list().filter { $0.mountpoint == fixture.mountpoint }.count, round == 2 ? 0 : 1, "round \(round)")
            if round < 2, let live = daemon(of: fixture.mountpoint) {
                XCTAssertEqual(Sys.contents(fixture.mountpoint + "/f\(round)").0, [1], "the new mount does not serve the backing folder")
                XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)
                MountedFolder.reap([live])
            }
        }
    }

    /// A daemon killed leaves its pid file (`daemon.pid`: its pid, then its start and boot). Once the
    /// kernel hands that pid to another process (a `sleep` started after the kill, its pid written
    /// into the file beside the dead daemon's start), the file names no daemon: `coordfs unmount` of
    /// the stale mount returns at once without waiting on the `sleep` or saying a daemon has not
    /// ended, and the next `coordfs mount` works and writes its own daemon's pid and start. Located by
    /// its backing folder (`coordfs log --backing B --info`) the stale mount is said to be gone.
    func testAKilledDaemonsPidHandedToAnotherProcessIsNotTakenForTheDaemon() throws {
        let pidFile = fixture.backing + "/.coordfs/daemon.pid"
        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
        guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("no daemon process found for the mount") }
        let written = try XCTUnwrap(DaemonPIDFile.read(pidFile), "the daemon's pid file")
        XCTAssertEqual(written, DaemonPIDFile(pid: pid, start: ProcessLife.startTime(pid), bootID: ProcessLife.bootID()))
        XCTAssertEqual(Sys.put(fixture.mountpoint + "/kept", [7]), .success())
        kill(pid, SIGKILL)
        MountedFolder.reap([pid])
        let sleeper = try Spawn.start("/bin/sleep", ["60"])
        defer { kill(sleeper, SIGKILL); _ = Spawn.wait(sleeper, timeout: 10) }
        let handedOut = "\(sleeper)\nstart=\(written.start ?? 0) boot=\(written.bootID ?? "")\n"
        XCTAssertEqual(Sys.put(pidFile, Array(handedOut.utf8)), .success())
        // Found from its backing folder, the mount is said to be gone as from its mount point (before:
        // "mounted").
        let info = coordfs("log", "--backing", fixture.backing, "--info")
        XCTAssertTrue(info.stdout.contains("mount:     \(fixture.mountpoint) (daemon gone)"), "log --backing --info: \(info)")
        let began = Date()
        let u = coordfs("unmount", fixture.mountpoint)
        let took = Date().timeIntervalSince(began)
        XCTAssertEqual(u.status, 0, "coordfs unmount of a stale mount whose pid file names a live sleep: \(u)")
        XCTAssertFalse(u.output.contains("has not ended"), "the sleep taken for the daemon: \(u)")
        XCTAssertLessThan(took, 5, "coordfs unmount waited on the sleep")
        assertNotMounted(fixture.mountpoint, "unmount of a stale mount")
        XCTAssertTrue(Mounts.isAlive(sleeper), "the sleep was signalled")
        let m = coordfs("mount", fixture.backing, fixture.mountpoint)
        XCTAssertEqual(m.status, 0, "the next mount: \(m)")
        guard let next = daemon(of: fixture.mountpoint) else { return XCTFail("no daemon after the next mount") }
        XCTAssertEqual(DaemonPIDFile.read(pidFile)?.pid, next, "the new daemon's pid file")
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/kept").0, [7], "the new mount does not serve the backing folder")
        let again = coordfs("unmount", fixture.mountpoint)
        XCTAssertEqual(again.status, 0, "unmount of the new mount: \(again)")
        MountedFolder.reap([next])
        XCTAssertFalse(Mounts.isAlive(next), "the new daemon outlived its unmount")
    }

    func testSIGTERMAndSIGINTUnmountCleanly() throws {
        for signal in [SIGTERM, SIGINT] {
            XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
            guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("no daemon process found for the mount") }
            kill(pid, signal)
            let deadline = Date().addingTimeInterval(10)
            while (Mounts.isMounted(fixture.mountpoint) || Mounts.isAlive(pid)) && Date() < deadline { usleep(20_000) }
            assertNotMounted(fixture.mountpoint, "10 s after signal \(signal) to the daemon")
            XCTAssertFalse(Mounts.isAlive(pid), "the daemon did not exit on signal \(signal)")
            XCTAssertEqual(Sys.stat(fixture.mountpoint).1, .success(), "the mountpoint is not usable after signal \(signal)")
        }
    }

    /// A signal unmounts as `umount -l` does: the mount leaves the tree at once, and what is still
    /// open in it (a file being written, a folder's descriptor) keeps working, on /dev/fuse and
    /// through io_uring, until it is let go; then the daemon ends. On /dev/fuse the daemon used to
    /// end after the first request that came after the signal, and the writer's next request failed
    /// with ECONNABORTED.
    func testASignalUnmountsAndServesWhatIsOpenUntilItIsLetGo() throws {
        for transport in ["dev", "auto"] {
            let m = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "transport=" + transport)
            guard m.status == 0 else { return XCTFail("\(transport): mount: \(m)") }
            guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("\(transport): no daemon process found") }
            defer { kill(pid, SIGKILL); MountedFolder.reap([pid]) }
            let file = open(fixture.mountpoint + "/held-" + transport, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            let folder = open(fixture.mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard file >= 0, folder >= 0 else { return XCTFail("\(transport): open through the mount: \(String(cString: strerror(errno)))") }
            var open = [file, folder]
            defer { open.forEach { close($0) } }
            XCTAssertEqual(write(file, "a", 1), 1)
            kill(pid, SIGTERM)
            let deadline = Date().addingTimeInterval(10)
            while Mounts.isMounted(fixture.mountpoint) && Date() < deadline { usleep(20_000) }
            assertNotMounted(fixture.mountpoint, "\(transport): 10 s after SIGTERM")
            // Requests of what is still open, well after the signal.
            for round in 0..<5 {
                usleep(50_000)
                XCTAssertEqual(Sys.call { write(file, "b", 1) }, .success(1), "\(transport): write \(round) to a file held open across SIGTERM")
                XCTAssertEqual(Sys.call { fsync(file) }, .success(), "\(transport): fsync \(round) of a file held open across SIGTERM")
                let made = openat(folder, "made-\(transport)-\(round)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                XCTAssertGreaterThanOrEqual(made, 0, "\(transport): create \(round) in a folder held open across SIGTERM: \(String(cString: strerror(errno)))")
                if made >= 0 { XCTAssertEqual(write(made, "c", 1), 1); close(made) }
                var st = stat()
                XCTAssertEqual(Sys.call { fstatat(folder, "made-\(transport)-\(round)", &st, 0) }, .success(), "\(transport): stat \(round) after SIGTERM")
            }
            XCTAssertTrue(Mounts.isAlive(pid), "\(transport): the daemon ended while files were open in its mount")
            open.forEach { close($0) }
            open = []
            let end = Date().addingTimeInterval(10)
            while Mounts.isAlive(pid) && Date() < end { usleep(20_000) }
            XCTAssertFalse(Mounts.isAlive(pid), "\(transport): the daemon did not end once what was open was let go")
            XCTAssertEqual(Sys.contents(fixture.backing + "/held-" + transport).0, Array("abbbbb".utf8), "\(transport): the held file in backing")
            for round in 0..<5 {
                XCTAssertEqual(Sys.contents(fixture.backing + "/made-\(transport)-\(round)").0, [UInt8(ascii: "c")], "\(transport): file \(round) made after SIGTERM")
            }
        }
    }

    /// A second signal ends a daemon the first left serving what is open in its unmounted mount (a
    /// shell's working folder would hold it forever): what is open fails with ECONNABORTED (or,
    /// through io_uring, ECANCELED until the kernel tore the ring down), the daemon ends and its log
    /// says why.
    func testASecondSignalEndsWhatTheFirstLeftServing() throws {
        for (round, transport) in ["dev", "auto"].enumerated() {
            let m = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "transport=" + transport)
            guard m.status == 0 else { return XCTFail("\(transport): mount: \(m)") }
            guard let pid = daemon(of: fixture.mountpoint) else { return XCTFail("\(transport): no daemon process found") }
            defer { kill(pid, SIGKILL); MountedFolder.reap([pid]) }
            let folder = open(fixture.mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard folder >= 0 else { return XCTFail("\(transport): open the mount's root") }
            defer { close(folder) }
            kill(pid, SIGTERM)
            let deadline = Date().addingTimeInterval(10)
            while Mounts.isMounted(fixture.mountpoint) && Date() < deadline { usleep(20_000) }
            assertNotMounted(fixture.mountpoint, "\(transport): 10 s after SIGTERM")
            var st = stat()
            XCTAssertEqual(Sys.call { fstatat(folder, "absent", &st, 0) }, .failure(ENOENT), "\(transport): a lookup through the held folder after SIGTERM")
            usleep(300_000)
            XCTAssertTrue(Mounts.isAlive(pid), "\(transport): the daemon ended while a folder was open in its mount")
            kill(pid, SIGTERM)
            let end = Date().addingTimeInterval(10)
            while Mounts.isAlive(pid) && Date() < end { usleep(20_000) }
            XCTAssertFalse(Mounts.isAlive(pid), "\(transport): the daemon did not end at a second SIGTERM")
            let after = Sys.call { fstatat(folder, "absent-after", &st, 0) }  // "absent" may be a cached miss
            // Through io_uring the kernel aborts the connection only when the dead daemon's ring is
            // torn down, a moment after its threads ended (when the daemon counts as ended): a
            // request in between is given to a cancelled ring entry and fails with ECANCELED
            // (MountPreflight.isDeadMount). Either way it fails at once.
            let ended: [Outcome] = [.failure(ECONNABORTED), .failure(ENOTCONN)] + (transport == "dev" ? [] : [.failure(ECANCELED)])
            XCTAssertTrue(ended.contains(after), "\(transport): the held folder after the second signal: \(after)")
            let log = (try? String(contentsOfFile: fixture.backing + "/.coordfs/daemon.log", encoding: .utf8)) ?? ""
            XCTAssertEqual(log.components(separatedBy: "a second signal: ending the session").count - 1, round + 1, "\(transport): daemon.log does not say why it ended: \(log.suffix(600))")
        }
    }

    func testForegroundMountAnswersAndStopsOnSIGINT() throws {
        let out = fixture.root + "/fg.log"
        let pid = try Spawn.start(binary, ["mount", fixture.backing, fixture.mountpoint, "-f"], stdout: out, stderr: out)
        let deadline = Date().addingTimeInterval(20)
        while !Mounts.isMounted(fixture.mountpoint) && Date() < deadline && Mounts.isAlive(pid) { usleep(20_000) }
        XCTAssertTrue(Mounts.isMounted(fixture.mountpoint), "-f did not mount within 20 s: \((try? String(contentsOfFile: out, encoding: .utf8)) ?? "")")
        XCTAssertEqual(Sys.readdir(fixture.mountpoint).1, .success(0))
        kill(pid, SIGINT)
        let status = Spawn.wait(pid, timeout: 10)
        XCTAssertEqual(status, 0, "coordfs mount -f exit status after SIGINT")
        assertNotMounted(fixture.mountpoint, "after SIGINT to the foreground daemon")
    }

    func testReadOnlyMountRefusesWritesWithEROFS() throws {
        XCTAssertEqual(Sys.put(fixture.backing + "/f", [1, 2, 3]), .success())
        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "ro").status, 0)
        let m = fixture.mountpoint
        XCTAssertEqual(Sys.contents(m + "/f").0, [1, 2, 3], "reading a read-only mount")
        XCTAssertEqual(Sys.open(m + "/f", O_WRONLY), .failure(EROFS), "open O_WRONLY")
        XCTAssertEqual(Sys.open(m + "/g", O_CREAT | O_WRONLY), .failure(EROFS), "create")
        XCTAssertEqual(Sys.call { mkdir(m + "/d", 0o755) }, .failure(EROFS), "mkdir")
        XCTAssertEqual(Sys.call { unlink(m + "/f") }, .failure(EROFS), "unlink")
        XCTAssertEqual(Sys.call { rename(m + "/f", m + "/h") }, .failure(EROFS), "rename")
        XCTAssertEqual(Sys.call { chmod(m + "/f", 0o600) }, .failure(EROFS), "chmod")
        XCTAssertEqual(Sys.call { truncate(m + "/f", 0) }, .failure(EROFS), "truncate")
        XCTAssertEqual(Sys.setxattr(m + "/f", "user.x", [1]), .failure(EROFS), "setxattr")
        XCTAssertEqual(Sys.call { symlink("f", m + "/l") }, .failure(EROFS), "symlink")
        XCTAssertTrue(Mounts.entry(at: m)?.options.split(separator: ",").contains("ro") ?? false, "/proc/mounts does not say ro")
        XCTAssertEqual(Sys.contents(fixture.backing + "/f").0, [1, 2, 3], "backing changed under a read-only mount")
    }

    func testRenameAndLinkAcrossTheMountBoundaryGiveEXDEV() {
        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other").status, 0)
        XCTAssertEqual(Sys.put(fixture.mountpoint + "/f", [1]), .success())
        XCTAssertEqual(Sys.put(fixture.native + "/n", [2]), .success())
        XCTAssertEqual(Sys.call { rename(fixture.mountpoint + "/f", fixture.native + "/f") }, .failure(EXDEV), "rename mount -> outside")
        XCTAssertEqual(Sys.call { rename(fixture.native + "/n", fixture.mountpoint + "/n") }, .failure(EXDEV), "rename outside -> mount")
        XCTAssertEqual(Sys.call { link(fixture.mountpoint + "/f", fixture.native + "/f2") }, .failure(EXDEV), "link mount -> outside")
        XCTAssertEqual(Sys.rename2(fixture.mountpoint + "/f", fixture.native + "/n", Linux.RENAME_EXCHANGE), .failure(EXDEV), "exchange across")
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/f").0, [1])
        XCTAssertEqual(Sys.contents(fixture.native + "/n").0, [2])
    }
    /// Without allow_other only the mounting user reaches the mount, the daemon acts as that user,
    /// and the backing folder's own checks decide (no default_permissions, no extra GETATTRs);
    /// with allow_other the kernel checks every caller (default_permissions).
    func testPermissionsOfASingleUserAndOfAnAllowOtherMount() {
        XCTAssertEqual(Sys.put(fixture.backing + "/secret", [7]), .success())
        XCTAssertEqual(Sys.call { chmod(fixture.backing + "/secret", 0o000) }, .success())
        XCTAssertEqual(Sys.put(fixture.backing + "/script", Array("#!/bin/sh\n".utf8)), .success())
        XCTAssertEqual(Sys.call { chmod(fixture.backing + "/script", 0o644) }, .success())

        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint).status, 0)
        let options = Mounts.entry(at: fixture.mountpoint)?.options.split(separator: ",") ?? []
        XCTAssertFalse(options.contains("default_permissions"), "\(options)")
        // Root reads a mode-000 file, and may not run a file without an execute bit: as natively.
        XCTAssertEqual(Sys.contents(fixture.mountpoint + "/secret").0, [7])
        XCTAssertEqual(Sys.call { access(fixture.mountpoint + "/script", X_OK) }, Sys.call { access(fixture.backing + "/script", X_OK) })
        XCTAssertEqual(Spawn.run(fixture.mountpoint + "/script", [], timeout: 10).status == 0, false, "ran a file without x bits")
        // Anyone else is turned away by the kernel.
        let other = asUser { ChildOutcome(outcome: Sys.stat(self.fixture.mountpoint + "/secret").1) }
        XCTAssertEqual(other.outcome, .failure(EACCES), "\(other)")
        XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)

        XCTAssertEqual(coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other").status, 0)
        let shared = Mounts.entry(at: fixture.mountpoint)?.options.split(separator: ",") ?? []
        XCTAssertTrue(shared.contains("default_permissions"), "\(shared)")
        let nobody = asUser { ChildOutcome(outcome: Sys.open(self.fixture.mountpoint + "/secret", O_RDONLY)) }
        XCTAssertEqual(nobody.outcome, .failure(EACCES), "\(nobody)")
        XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)
    }

    /// The state folder is where the daemon (root) writes its pid file, its log, the event log, the
    /// store and the socket. In a folder others may write (a shared, sticky drop folder) another user
    /// could make `.coordfs` first, with `daemon.pid` and `daemon.log` as links to a file of root's:
    /// the mount refuses a state folder that is not its own user's alone, and writes nothing through
    /// it. A backing folder other users may write without the sticky bit is refused too (they could
    /// move `.coordfs` away and put theirs in its place); a sticky one mounts. Root's commands read
    /// nobody's planted pid file as a small regular file only (a link to /dev/zero is none).
    func testAStateFolderAnotherUserCouldChangeIsRefusedAndOneMovedAwayIsNotFollowed() throws {
        let victim = fixture.root + "/victim"
        let precious = Array("root's own file\n".utf8)
        XCTAssertEqual(Sys.put(victim, precious, mode: 0o600), .success())
        let state = fixture.backing + "/.coordfs"
        XCTAssertEqual(Sys.call { chmod(fixture.backing, 0o1777) }, .success())
        let planted = asUser {
            guard mkdir(state, 0o777) == 0, chmod(state, 0o777) == 0,
                  symlink(victim, state + "/daemon.pid") == 0, symlink(victim, state + "/daemon.log") == 0,
                  mkdir(state + "/log", 0o777) == 0 else { return ChildOutcome(outcome: .failure(errno)) }
            return ChildOutcome(outcome: .success())
        }
        XCTAssertEqual(planted.outcome, .success(), "nobody could not prepare its state folder: \(planted)")
        let r = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other")
        defer { if Mounts.isMounted(fixture.mountpoint) { coordfs("unmount", fixture.mountpoint) } }
        XCTAssertEqual(r.status, 1, "a state folder of nobody's was used: \(r)")
        XCTAssertTrue(r.output.contains(".coordfs") && r.output.contains("uid 65534"), "the refusal does not say whose folder it is: \(r)")
        assertNotMounted(fixture.mountpoint, "nobody's state folder")
        XCTAssertEqual(String(decoding: Sys.contents(victim).0 ?? [], as: UTF8.self), String(decoding: precious, as: UTF8.self),
                       "root's file was written through nobody's links")
        var st = stat()
        XCTAssertEqual(lstat(state + "/log", &st), 0)
        XCTAssertEqual(Sys.readdir(state + "/log").0.count, 0, "the event log was written into nobody's folder")

        // Root's own state folder, but writable by others: refused as well.
        MountedFolder.removeTree(state)
        XCTAssertEqual(Sys.call { mkdir(state, 0o700) }, .success())
        XCTAssertEqual(Sys.call { chmod(state, 0o733) }, .success())
        let open = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other")
        XCTAssertEqual(open.status, 1, "a state folder others may write was used: \(open)")
        XCTAssertTrue(open.output.contains("writable by other users"), "\(open)")
        assertNotMounted(fixture.mountpoint, "a state folder others may write")

        // A backing folder anyone may write, not sticky (as a folder shared by a group must be, for
        // its users to make files at its top through the mount): it mounts, saying that others may
        // move .coordfs away. Nobody moves it away and plants a .coordfs of its own with links to
        // root's file: the daemon goes on with the folder it checked and holds, and writes nothing
        // through nobody's links or into nobody's folder.
        MountedFolder.removeTree(state)
        XCTAssertEqual(Sys.call { chmod(fixture.backing, 0o777) }, .success())
        let swappable = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other")
        XCTAssertEqual(swappable.status, 0, "a backing folder others may write was refused: \(swappable)")
        XCTAssertTrue(swappable.output.contains("sticky"), "the mount does not say others may move .coordfs away: \(swappable)")
        let stolen = fixture.backing + "/stolen"
        let swapped = asUser {
            guard rename(state, stolen) == 0, mkdir(state, 0o777) == 0, chmod(state, 0o777) == 0 else { return ChildOutcome(outcome: .failure(errno)) }
            for name in ["daemon.pid", "daemon.log", "control.sock", "mount"] where symlink(victim, state + "/" + name) != 0 {
                return ChildOutcome(outcome: .failure(errno))
            }
            for folder in ["log", "store"] where mkdir(state + "/" + folder, 0o777) != 0 || chmod(state + "/" + folder, 0o777) != 0 {
                return ChildOutcome(outcome: .failure(errno))
            }
            return ChildOutcome(outcome: .success())
        }
        XCTAssertEqual(swapped.outcome, .success(), "nobody could not swap the state folder: \(swapped)")
        let logBefore = Sys.readdir(stolen + "/log").0.reduce(0) { $0 + (Sys.contents(stolen + "/log/" + $1.name).0?.count ?? 0) }
        // Root's commands do not take nobody's folder for the mount's.
        let status = coordfs("status", fixture.mountpoint)
        XCTAssertNotEqual(status.status, 0, "coordfs status used nobody's state folder: \(status)")
        XCTAssertTrue(status.output.contains("uid 65534"), "coordfs status does not say whose the folder is: \(status)")
        // Nobody's pid file a link to /dev/zero: root's commands read it before they know whose the
        // folder is, and read no further than a pid file's size (before: on and on, until killed).
        let zeroed = asUser {
            guard unlink(state + "/daemon.pid") == 0, symlink("/dev/zero", state + "/daemon.pid") == 0 else { return ChildOutcome(outcome: .failure(errno)) }
            return ChildOutcome(outcome: .success())
        }
        XCTAssertEqual(zeroed.outcome, .success(), "\(zeroed)")
        let log = coordfs("log", fixture.mountpoint, "--info")
        XCTAssertEqual(log.timedOut, false, "coordfs log read nobody's /dev/zero: \(log)")
        XCTAssertTrue(log.output.contains("uid 65534"), "coordfs log does not say whose the folder is: \(log)")
        // Writes through the mount (event records), then the unmount (the daemon removes its pid
        // file and closes its log).
        for n in 0..<20 {
            XCTAssertEqual(Sys.put(fixture.mountpoint + "/after-the-swap-\(n)", Array("one\n".utf8)), .success())
        }
        // The daemon removes its pid file and closes its log as it ends, which may be after the
        // unmount returned: wait for it to end before looking.
        let daemonPID = DaemonPIDFile.parse(Sys.contents(stolen + "/daemon.pid").0 ?? [])?.pid ?? 0
        XCTAssertGreaterThan(daemonPID, 0, "the daemon's pid file is not in its own folder")
        XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)
        let ends = Date().addingTimeInterval(20)
        while daemonPID > 0, Mounts.isAlive(daemonPID), Date() < ends { usleep(20_000) }
        XCTAssertFalse(daemonPID > 0 && Mounts.isAlive(daemonPID), "the daemon did not end after the unmount")
        XCTAssertEqual(Sys.contents(victim).0 == precious, true, "root's file was written through nobody's links")
        XCTAssertEqual(Sys.readdir(state + "/log").0.map(\.name), [], "the event log was written into nobody's folder")
        XCTAssertEqual(Sys.readdir(state + "/store").0.map(\.name), [], "the store was written into nobody's folder")
        XCTAssertEqual(Set(Sys.readdir(state).0.map(\.name)), ["daemon.pid", "daemon.log", "control.sock", "mount", "log", "store"], "nobody's folder changed")
        let logAfter = Sys.readdir(stolen + "/log").0.reduce(0) { $0 + (Sys.contents(stolen + "/log/" + $1.name).0?.count ?? 0) }
        XCTAssertGreaterThan(logAfter, logBefore, "the daemon stopped writing its event log into its own folder")
        XCTAssertFalse(Sys.readdir(stolen).0.map(\.name).contains("daemon.pid"), "the daemon's pid file was not removed from its own folder")
        XCTAssertTrue(String(decoding: Sys.contents(stolen + "/daemon.log").0 ?? [], as: UTF8.self).contains("sticky"),
                      "daemon.log does not say others may move the state folder away")
        MountedFolder.removeTree(state)
        XCTAssertEqual(Sys.call { rename(stolen, state) }, .success())

        // Sticky: nobody cannot move root's .coordfs away, and the mount serves.
        XCTAssertEqual(Sys.call { chmod(fixture.backing, 0o1777) }, .success())
        let sticky = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other")
        XCTAssertEqual(sticky.status, 0, "a sticky shared backing folder was refused: \(sticky)")
        let moved = asUser { ChildOutcome(outcome: Sys.call { rename(state, self.fixture.backing + "/stolen") }) }
        XCTAssertEqual(moved.outcome, .failure(EPERM), "nobody moved root's state folder: \(moved)")
        XCTAssertEqual(coordfs("unmount", fixture.mountpoint).status, 0)
        XCTAssertEqual(Sys.contents(victim).0 == precious, true, "root's file changed")
    }

    /// The kernel sends a create for a name it last knew as missing; another user's file may have
    /// appeared there since, made beside the mount (here with the watcher off and missing names
    /// kept 10 s, as an explicit configuration may). The daemon (root) opened that file, with no
    /// permission check, and handed it to the creator: nobody got a descriptor for a 0600 file of
    /// another user's and became its owner. Now an existing file is opened only as its mode lets
    /// the caller open it natively, and keeps its owner.
    func testACreateOfANameThatAppearedBesideTheMountNeverTakesAnotherUsersFile() throws {
        try mountSharedWithoutWatcher()
        defer { coordfs("unmount", fixture.mountpoint) }
        for (name, mode) in [("private", mode_t(0o600)), ("open", mode_t(0o666))] {
            appearsBesideTheMount(name, mode: mode)
            let created = createAsNobody(name, O_CREAT | O_RDWR)
            // As natively: a 0600 file of another user is refused, a 0666 one opened.
            XCTAssertEqual(created.outcome, mode == 0o600 ? .failure(EACCES) : .success(), "nobody's create of alice's \(name) file")
            XCTAssertEqual(Sys.lstat(fixture.backing + "/shared/" + name).0?.uid, Self.alice, "alice's \(name) file was given to nobody")
            XCTAssertEqual(Sys.contents(fixture.backing + "/shared/" + name).0.map { String(decoding: $0, as: UTF8.self) }, "alice's \(name)\n")
        }
    }

    /// Such a create is judged by the kernel as the caller's own open (the daemon opens the file
    /// with the caller's fsuid, fsgid and supplementary groups on its thread): a supplementary
    /// group of the file's, or a POSIX ACL's grant, opens it as natively, where the daemon's own
    /// reading of the mode bits counted neither (EACCES); what the kernel refuses stays refused,
    /// and O_TRUNC truncates only what the caller may write.
    func testACreateOfANameThatAppearedBesideTheMountIsJudgedAsTheCallersOwnOpen() throws {
        try mountSharedWithoutWatcher()
        defer { coordfs("unmount", fixture.mountpoint) }
        let team: gid_t = 4243
        let cases: [(name: String, mode: mode_t, acl: [UInt8]?, groups: [gid_t], flags: Int32, refused: Bool)] = [
            ("team-member", 0o660, nil, [team], O_CREAT | O_WRONLY | O_APPEND, false),
            ("team-outsider", 0o660, nil, [], O_CREAT | O_WRONLY | O_APPEND, true),
            ("acl-writer", 0o600, PosixACL.user(nobodyUID, perm: 6), [], O_CREAT | O_RDWR | O_APPEND, false),
            ("acl-reader-truncating", 0o600, PosixACL.user(nobodyUID, perm: 4), [], O_CREAT | O_RDONLY | O_TRUNC, true),
            ("others-may-write-truncating", 0o666, nil, [], O_CREAT | O_WRONLY | O_TRUNC, false),
        ]
        for c in cases {
            appearsBesideTheMount(c.name, mode: c.mode, group: team, acl: c.acl)
            let created = createAsNobody(c.name, c.flags, groups: c.groups, writing: "nobody's\n")
            XCTAssertEqual(created.outcome, c.refused ? .failure(EACCES) : .success(), "nobody's create of \(c.name)")
            let backing = fixture.backing + "/shared/" + c.name
            let before = "alice's \(c.name)\n"
            let expected = c.refused ? before : c.flags & O_TRUNC != 0 ? "nobody's\n" : before + "nobody's\n"
            XCTAssertEqual(Sys.contents(backing).0.map { String(decoding: $0, as: UTF8.self) }, expected, c.name)
            XCTAssertEqual(Sys.lstat(backing).0?.uid, Self.alice, "\(c.name) was given to nobody")
        }
    }

    /// The user whose files appear beside the mount in the tests above.
    private static let alice: uid_t = 4242

    /// Mounts the backing folder for every user, with a world-writable folder `shared`, the
    /// watcher off and missing names kept 10 s: a name looked up as missing stays so for the
    /// kernel while a file appears beside the mount.
    private func mountSharedWithoutWatcher() throws {
        let shared = fixture.backing + "/shared"
        XCTAssertEqual(Sys.call { mkdir(shared, 0o777) }, .success())
        XCTAssertEqual(Sys.call { chmod(shared, 0o777) }, .success())
        let r = coordfs("mount", fixture.backing, fixture.mountpoint, "-o", "allow_other,backing_watcher=off,negative_timeout=10")
        XCTAssertEqual(r.status, 0, "\(r)")
    }

    /// nobody looks `shared/name` up through the mount (missing, and so kept), then alice's file
    /// of that name, with `mode`, group `group` and access ACL `acl`, appears in the backing folder.
    private func appearsBesideTheMount(_ name: String, mode: mode_t, group: gid_t = alice, acl: [UInt8]? = nil) {
        let seen = asUser { ChildOutcome(outcome: Sys.lstat(self.fixture.mountpoint + "/shared/" + name).1) }
        XCTAssertEqual(seen.outcome, .failure(ENOENT), name)
        let path = fixture.backing + "/shared/" + name
        XCTAssertEqual(Sys.put(path, Array("alice's \(name)\n".utf8), mode: mode), .success())
        XCTAssertEqual(Sys.call { chown(path, Self.alice, group) }, .success())
        XCTAssertEqual(Sys.call { chmod(path, mode) }, .success())
        if let acl { XCTAssertEqual(Sys.setxattr(path, "system.posix_acl_access", acl), .success(), name) }
    }

    /// nobody's open(2) of `shared/name` through the mount with `flags` (and `groups`), writing
    /// `writing` once it is open.
    private func createAsNobody(_ name: String, _ flags: Int32, groups: [gid_t] = [], writing: String = "") -> ChildOutcome {
        asUser(groups: groups) {
            let fd = open(self.fixture.mountpoint + "/shared/" + name, flags | O_CLOEXEC, 0o644)
            if fd < 0 { return ChildOutcome(outcome: .failure(errno)) }
            defer { close(fd) }
            let bytes = Array(writing.utf8)
            if !bytes.isEmpty, write(fd, bytes, bytes.count) != bytes.count { return ChildOutcome(outcome: .failure(errno)) }
            return ChildOutcome(outcome: .success())
        }
    }
}
