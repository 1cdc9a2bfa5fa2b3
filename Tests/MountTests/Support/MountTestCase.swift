// The base class of the mount suites: a fresh mount per test, helpers that run one operation on
// the native folder and on the mount and compare the outcomes, and a teardown that compares the
// resulting trees and then always unmounts.
import Foundation
import Glibc
import XCTest

/// One of the folders a test operates on; calling it with a relative path gives the full path.
struct Side: CustomStringConvertible {
    let label: String
    let root: String
    func callAsFunction(_ rel: String) -> String { rel.isEmpty ? root : root + "/" + rel }
    var description: String { label }
}

/// The same kind of handle (an fd, usually) opened on the native side and on the mount.
struct Pair<T> {
    var native: T
    var mnt: T
}

class MountTestCase: XCTestCase {
    /// The fixture of the current test (nil outside a test).
    var fixture: MountedFolder!
    var native: Side!
    var mnt: Side!
    var backing: Side!
    var target: MountTarget { fixture.target }

    /// Options passed with `-o` by the default mount; `allow_other` lets the non-root user in.
    var mountOptions: [String] { ["allow_other"] }
    /// RLIMIT_NOFILE for the daemon (nil: the default, which the daemon raises to its hard limit).
    var descriptorLimit: Int? { nil }
    /// Its soft limit at the start, when lower (nil: the same); the daemon raises it to the hard one.
    var softDescriptorLimit: Int? { nil }
    /// Whether setUp mounts (the CLI tests mount on their own).
    var mountsInSetUp: Bool { true }
    /// Whether tearDown requires native, mount and backing trees to be identical.
    var comparesTreesAtEnd: Bool { true }

    override func setUpWithError() throws {
        try super.setUpWithError()
        umask(0o022)
        MountedFolder.cleanLeftovers()
        let target = try MountTarget.fromEnvironment()
        let fixture = try MountedFolder(target: target)
        do {
            if mountsInSetUp { try fixture.mount(options: mountOptions, descriptorLimit: descriptorLimit, softDescriptorLimit: softDescriptorLimit) }
        } catch {
            fixture.destroy()
            throw error
        }
        self.fixture = fixture
        native = Side(label: "native", root: fixture.native)
        mnt = Side(label: "mount", root: fixture.mnt)
        backing = Side(label: "backing", root: fixture.backing)
    }

    override func tearDownWithError() throws {
        defer { fixture = nil }
        guard let fixture else { return try super.tearDownWithError() }
        umask(0o022)
        if comparesTreesAtEnd && (fixture.mounted || !target.isMount) {
            assertTreesMatch()
        }
        let problems = fixture.destroy()
        XCTAssertTrue(problems.isEmpty, "teardown: \(problems.joined(separator: "; "))")
        try super.tearDownWithError()
    }

    /// Native, mount and backing hold the same tree (the state folder excluded from backing).
    func assertTreesMatch(file: StaticString = #filePath, line: UInt = #line) {
        let n = Tree.snapshot(native.root)
        let m = Tree.snapshot(mnt.root)
        let diffMount = Tree.diff(n, m, labels: ("native", "mount"))
        XCTAssertTrue(diffMount.isEmpty, "trees differ after the test:\n" + diffMount.joined(separator: "\n"), file: file, line: line)
        if target.isMount {
            let b = Tree.snapshot(backing.root, skipTopLevel: [".coordfs"])
            let diffBacking = Tree.diff(n, b, labels: ("native", "backing"))
            XCTAssertTrue(diffBacking.isEmpty, "backing differs from native after the test:\n" + diffBacking.joined(separator: "\n"), file: file, line: line)
        }
    }

    // MARK: comparing one operation on both sides

    /// Runs `body` on the native folder, then on the mount, and asserts both gave the same
    /// result (and `expect`, when given, so a wrongly written test cannot pass on both sides).
    @discardableResult
    func same<T: Equatable>(_ op: String, expect: T? = nil, file: StaticString = #filePath, line: UInt = #line,
                            _ body: (Side) -> T) -> T {
        report(op, body(native), body(mnt), expect: expect, file: file, line: line)
    }

    /// Like `same`, with a handle (fd) that was opened on each side.
    @discardableResult
    func same<T: Equatable, H>(_ op: String, on handles: Pair<H>, expect: T? = nil, file: StaticString = #filePath,
                               line: UInt = #line, _ body: (H) -> T) -> T {
        report(op, body(handles.native), body(handles.mnt), expect: expect, file: file, line: line)
    }

    /// Asserts native == mount (and == expect), with short descriptions of large values.
    private func report<T: Equatable>(_ op: String, _ n: T, _ m: T, expect: T?, file: StaticString, line: UInt) -> T {
        if n != m { XCTFail("\(op): native gave \(brief(n)), mount gave \(brief(m))", file: file, line: line) }
        if let expect, n != expect {
            XCTFail("\(op): native gave \(brief(n)), the test expects \(brief(expect))", file: file, line: line)
        }
        return n
    }

    /// At most 300 characters of a value's description (buffers can be megabytes).
    func brief<T>(_ value: T) -> String {
        let text = String(describing: value)
        return text.count <= 300 ? text : text.prefix(300) + "… (\(text.count) characters)"
    }

    /// Runs `body` on each side as the `nobody` user and compares.
    @discardableResult
    func sameAsNobody(_ op: String, expect: Outcome? = nil, file: StaticString = #filePath, line: UInt = #line,
                      _ body: @escaping (Side) -> Outcome) -> Outcome {
        let r = same("\(op) [as nobody]", file: file, line: line) { side in asUser { ChildOutcome(outcome: body(side)) } }
        XCTAssertNotEqual(r.outcome.err, ECHILD, "\(op): the child could not become nobody", file: file, line: line)
        if let expect {
            XCTAssertEqual(r.outcome, expect, "\(op) [as nobody]: native gave \(r.outcome), the test expects \(expect)", file: file, line: line)
        }
        return r.outcome
    }

    /// A set-up step that must succeed on both sides.
    func prepare(_ op: String, file: StaticString = #filePath, line: UInt = #line, _ body: (Side) -> Outcome) {
        for side in [native!, mnt!] {
            let o = body(side)
            XCTAssertTrue(o.ok, "set-up step \(op) failed on \(side): \(o)", file: file, line: line)
        }
    }

    /// Opens `rel` on both sides; fails the test (and returns nil) when either side cannot.
    func openBoth(_ rel: String, _ flags: Int32, _ mode: mode_t = 0o644, file: StaticString = #filePath,
                  line: UInt = #line) -> Pair<Int32>? {
        let n = Sys.open(native(rel), flags, mode), m = Sys.open(mnt(rel), flags, mode)
        XCTAssertEqual(n.err, m.err, "open \(rel) flags=\(String(flags, radix: 8)): native gave \(n), mount gave \(m)", file: file, line: line)
        guard n.ok, m.ok else {
            if n.ok { close(Int32(n.ret)) }
            if m.ok { close(Int32(m.ret)) }
            XCTFail("open \(rel): native gave \(n), mount gave \(m)", file: file, line: line)
            return nil
        }
        return Pair(native: Int32(n.ret), mnt: Int32(m.ret))
    }

    /// Closes both fds, comparing the outcome of close (which is where FUSE flushes).
    func closeBoth(_ fds: Pair<Int32>, file: StaticString = #filePath, line: UInt = #line) {
        same("close", on: fds, expect: Outcome.success(), file: file, line: line) { fd in Sys.call { close(fd) } }
    }

    /// lstat (or stat) of `rel` on both sides: the shape must match (mode, nlink, owner, size, rdev).
    @discardableResult
    func sameMeta(_ rel: String, follow: Bool = false, file: StaticString = #filePath, line: UInt = #line) -> Meta? {
        let n = follow ? Sys.stat(native(rel)) : Sys.lstat(native(rel))
        let m = follow ? Sys.stat(mnt(rel)) : Sys.lstat(mnt(rel))
        let op = "\(follow ? "stat" : "lstat") \(rel.isEmpty ? "(the root)" : rel)"
        XCTAssertEqual(n.1, m.1, "\(op): native gave \(n.1), mount gave \(m.1)", file: file, line: line)
        if let a = n.0, let b = m.0 {
            XCTAssertTrue(a.sameShape(as: b), "\(op): native \(a.shape), mount \(b.shape)", file: file, line: line)
        }
        return m.0
    }

    /// Skips unless the target is a real mount (some checks only mean something through FUSE).
    func requireMount() throws {
        guard target.isMount else { throw XCTSkip("needs a real mount; target is \(target)") }
    }

    /// Bytes 0..<count of a repeating, position-dependent pattern (so shifted data is caught).
    func pattern(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 8) &+ Int(seed)) }
    }
}
