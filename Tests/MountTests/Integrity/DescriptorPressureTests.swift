// Descriptor pressure costs speed, not correctness (issue 24): with RLIMIT_NOFILE at 1,024 (a node
// budget of 512) and at the default, the daemon keeps its descriptors under the limit, gives them
// back when the kernel forgets nodes, and a workload that passes natively passes through the mount,
// with `find`, `ls -lR`, open, readlink and xattrs right after it.
import Foundation
import Glibc
import XCTest

final class DescriptorPressureTests: DescriptorPressureTestCase {
    override var descriptorLimit: Int? { 1024 }

    /// 1,500 directories the kernel keeps knowing (more than the whole descriptor limit), each then
    /// used: a file made in it, listed, read back.
    func testDirectoriesBeyondTheLimitKeepWorking() throws {
        try requireMount()
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 1024, "the daemon must run with the lowered descriptor limit")
        let count = 1500
        for i in 0..<count {
            let made = Sys.call { mkdir(mnt("d\(i)"), 0o755) }
            if !made.ok { return XCTFail("mkdir d\(i) through the mount: \(made)") }
        }
        for i in stride(from: 0, to: count, by: 1) {
            let put = Sys.put(mnt("d\(i)/f"), Array("\(i)".utf8))
            if !put.ok { return XCTFail("creating d\(i)/f through the mount: \(put)") }
        }
        for i in [0, 1, count / 2, count - 1] {
            XCTAssertEqual(Sys.readdir(mnt("d\(i)")).0.map(\.name), ["f"], "listing d\(i)")
            XCTAssertEqual(Sys.contents(mnt("d\(i)/f")).0, Array("\(i)".utf8), "reading d\(i)/f")
        }
        assertMountMatchesBacking()
        if let open = fixture.daemonOpenDescriptors() {
            XCTAssertLessThan(open, 1024 - 64, "the daemon holds \(open) descriptors at a limit of 1,024")
        }
    }

    /// Several processes of random creates, links, renames, unlinks, directories, symlinks, xattrs
    /// and I/O on shared names, at 1,024 descriptors.
    func testStressAtALowDescriptorLimit() throws {
        try requireMount()
        XCTAssertEqual(fixture.daemonDescriptorLimit(), 1024, "the daemon must run with the lowered descriptor limit")
        try stress()
    }

}

/// The same workload at the machine's default descriptor limit (which the daemon raises to its hard
/// limit).
final class DescriptorPressureTestsAtTheDefaultLimit: DescriptorPressureTestCase {
    func testStressAtTheDefaultDescriptorLimit() throws {
        try requireMount()
        try stress()
    }
}

/// The stress workload and the checks after it.
class DescriptorPressureTestCase: MountTestCase {
    override var comparesTreesAtEnd: Bool { false }
    /// Without coordination: the workers open, write and remove the same names at once, and the
    /// coordinated mount makes such accesses wait for each other (up to `write_wait`, then EBUSY;
    /// `docs/semantics.md`), which is its own subject. This is about the file system underneath.
    /// Without kernel passthrough: a file opened with it stays registered, its inode in use, while
    /// the kernel knows it, so deleted files' numbers would not come back while their nodes live.
    override var mountOptions: [String] {
        (try? MountTarget.fromEnvironment().isCoordFS) == true ? super.mountOptions + ["coordination=off", "passthrough=off"] : super.mountOptions
    }

    /// Runs `processes` stress workers on the mount, then checks every item through the mount
    /// against the backing folder, `find` and `ls -lR`, and the daemon's descriptors.
    func stress(processes: Int = 6, operations: Int = 4000) throws {
        guard let python = Spawn.which("python3") else { throw XCTSkip("python3 is needed for the stress workers") }
        let script = fixture.root + "/stress.py"
        XCTAssertTrue(FileManager.default.createFile(atPath: script, contents: Data(Self.worker.utf8)))
        let before = fixture.daemonDescriptorsInBacking() ?? 0
        let logs = (0..<processes).map { fixture.root + "/worker-\($0).log" }
        // Past the daemon's node budget (half its limit) with files the kernel keeps knowing, so that
        // nodes keep only their file handles while the workers delete and create (at most 30,000).
        let budget = (fixture.daemonDescriptorLimit() ?? 1024) / 2
        let files = min(5000, (budget + 600 + processes - 1) / processes)
        let pids = try (0..<processes).map { w in
            try Spawn.start(python, [script, mnt.root, "\(w)", "\(operations)", "\(files)", "\(processes)", fixture.root],
                            stdout: logs[w], stderr: logs[w])
        }
        for (w, pid) in pids.enumerated() {
            let status = Spawn.wait(pid, timeout: 120)
            let log = (try? String(contentsOfFile: logs[w], encoding: .utf8)) ?? ""
            XCTAssertEqual(status, 0, "stress worker \(w): \(log)")
        }
        if let open = fixture.daemonOpenDescriptors(), let limit = fixture.daemonDescriptorLimit() {
            XCTAssertLessThan(open, limit, "the daemon holds \(open) descriptors at a limit of \(limit)")
        }
        assertMountMatchesBacking()
        for (tool, args) in [("find", [mnt.root]), ("ls", ["-lR", mnt.root])] {
            guard let exe = Spawn.which(tool) else { continue }
            let r = Spawn.run(exe, args, timeout: 60)
            XCTAssertEqual(r.status, 0, "\(tool) through the mount after the run: \(r.stderr.prefix(500))")
            XCTAssertEqual(r.stderr, "", "\(tool) through the mount after the run")
        }
        // Everything removed through the mount: the kernel forgets the nodes, and their descriptors
        // go back (one may stay: the descriptor open_by_handle_at needs on the backing file system).
        let rm = Spawn.run("/bin/rm", ["-rf", mnt("w")], timeout: 60)
        XCTAssertEqual(rm.status, 0, "rm -rf through the mount: \(rm)")
        var after = Int.max
        for _ in 0..<100 {
            after = fixture.daemonDescriptorsInBacking() ?? 0
            if after <= before + 1 { break }
            usleep(50_000)
        }
        XCTAssertLessThanOrEqual(after, before + 1, "descriptors on backing items before the run: \(before), after everything was removed: \(after)")
    }

    /// Every item through the mount as in the backing folder: type, mode, owner, size, links,
    /// device, symlink target, content and user xattrs (`Tree`), read with lstat, readlink, open
    /// and listxattr/getxattr through the mount.
    func assertMountMatchesBacking(file: StaticString = #filePath, line: UInt = #line) {
        let diff = Tree.diff(Tree.snapshot(backing.root, skipTopLevel: [".coordfs"]), Tree.snapshot(mnt.root), labels: ("backing", "mount"))
        XCTAssertTrue(diff.isEmpty, "the mount differs from its backing folder:\n" + diff.joined(separator: "\n"), file: file, line: line)
    }

    /// One stress worker: its own 250 directories (so that, with six workers, the kernel knows more
    /// directories than the daemon's whole descriptor limit 1,024) and `files` files in them, waits
    /// for the others to have made theirs (files `filled-N` in the folder `meeting`), then random
    /// operations on names shared
    /// with the other workers, holding up to 16 items open with O_PATH. Races between workers give
    /// ENOENT, EEXIST and the like (as natively); any other error fails the run. Every open is
    /// non-blocking (FIFOs among the names).
    static let worker = #"""
    import errno, os, random, sys, time
    root, me, n, files, workers, meeting = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    rng = random.Random(me * 7919 + 17)
    base = os.path.join(root, "w")
    os.makedirs(base, exist_ok=True)
    mine = os.path.join(base, "own%d" % me)
    os.makedirs(mine, exist_ok=True)
    for i in range(250):
        os.mkdir(os.path.join(mine, "d%d" % i))
    for i in range(files):
        os.close(os.open(os.path.join(mine, "d%d" % (i % 250), "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    # Every worker past its filling before any goes on: the node budget is full from here.
    open(os.path.join(meeting, "filled-%d" % me), "w").close()
    deadline = time.time() + 60
    while sum(os.path.exists(os.path.join(meeting, "filled-%d" % w)) for w in range(workers)) < workers and time.time() < deadline:
        time.sleep(0.01)
    shared = [os.path.join(base, "s%d" % d) for d in range(4)]
    for d in shared:
        os.makedirs(d, exist_ok=True)
    def name():
        return os.path.join(rng.choice(shared), "n%d" % rng.randrange(32))
    expected = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR, errno.ENODATA,
                errno.EINVAL, errno.EPERM, errno.ELOOP, errno.EMLINK, errno.ENXIO,
                errno.EPIPE}  # a FIFO (op_mknod) written after its reader (another worker's op_read) closed it, as natively
    unexpected, held = [], []
    def op_create(p):
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        try: os.write(fd, rng.randbytes(rng.randrange(1, 3000)))
        finally: os.close(fd)
    def op_append(p):
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
        try: os.write(fd, rng.randbytes(rng.randrange(1, 500)))
        finally: os.close(fd)
    def op_read(p):
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try: os.read(fd, 65536)
        finally: os.close(fd)
    def op_truncate(p): os.truncate(p, rng.randrange(0, 2000))
    def op_link(p): os.link(p, name(), follow_symlinks=False)
    def op_rename(p): os.rename(p, name())
    def op_unlink(p): os.unlink(p)
    def op_mkdir(p): os.mkdir(p)
    def op_rmdir(p): os.rmdir(p)
    def op_symlink(p): os.symlink("../s%d/n%d" % (rng.randrange(4), rng.randrange(32)), p)
    def op_readlink(p): os.readlink(p)
    def op_setxattr(p): os.setxattr(p, "user.k%d" % rng.randrange(4), rng.randbytes(rng.randrange(1, 200)), follow_symlinks=False)
    def op_removexattr(p): os.removexattr(p, "user.k%d" % rng.randrange(4), follow_symlinks=False)
    def op_listxattr(p): os.listxattr(p, follow_symlinks=False)
    def op_lstat(p): os.lstat(p)
    def op_hold(p):
        held.append(os.open(p, os.O_PATH | os.O_NOFOLLOW))
        if len(held) > 64: os.close(held.pop(0))
    def op_mknod(p): os.mknod(p, 0o644 | 0o10000)  # a FIFO
    ops = [op_create] * 6 + [op_append, op_read, op_truncate, op_link, op_link, op_rename, op_rename, op_unlink,
           op_unlink, op_unlink, op_mkdir, op_rmdir, op_symlink, op_readlink, op_setxattr, op_setxattr,
           op_removexattr, op_listxattr, op_lstat, op_hold, op_hold, op_mknod]
    for i in range(n):
        op = rng.choice(ops)
        try:
            op(name())
        except OSError as e:
            if e.errno not in expected:
                unexpected.append("%s: %s" % (op.__name__, e))
    for fd in held: os.close(fd)
    if unexpected:
        print("%d unexpected errors, e.g.:\n%s" % (len(unexpected), "\n".join(unexpected[:10])))
        sys.exit(1)
    """#
}
