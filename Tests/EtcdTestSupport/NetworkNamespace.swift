// A network namespace joined to this one by a veth pair, for partitions made on this machine:
// `hostAddress` is this side's end, `innerAddress` the namespace's; `cut()` sets this side's end
// down (nothing passes either way), `restore()` sets it up again. Processes run inside with
// `nsenter --net` (only the network namespace: their FUSE mounts stay visible here). `remove()`
// deletes the namespace and the pair; a guard process does it if the test process dies first.
import Foundation
import Glibc

public final class NetworkNamespace: @unchecked Sendable {
    public let name: String
    public let hostInterface: String
    public let hostAddress: String
    public let innerAddress: String
    private var guardPid: pid_t = 0
    private var removed = false

    nonisolated(unsafe) private static var counter = 0

    public init() throws {
        Self.counter += 1
        let tag = "\(getpid() % 100_000)x\(Self.counter)"
        name = "coordfs-\(tag)"
        hostInterface = "cfh\(tag)"
        let inner = "cfn\(tag)"
        // A /30 in 10.213.0.0/16 picked from the pid and the counter.
        let subnet = (Int(getpid()) * 7 + Self.counter) % 16_000
        let base = subnet * 4
        hostAddress = "10.213.\(base / 256).\(base % 256 + 1)"
        innerAddress = "10.213.\(base / 256).\(base % 256 + 2)"
        do {
            try Self.ip(["netns", "add", name])
            let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 0.5; done; ip netns del '\(name)' 2>/dev/null"
            guardPid = try EtcdCluster.spawn("/bin/sh", ["-c", script], output: "/dev/null")
            try Self.ip(["link", "add", hostInterface, "type", "veth", "peer", "name", inner])
            try Self.ip(["link", "set", inner, "netns", name])
            try Self.ip(["addr", "add", hostAddress + "/30", "dev", hostInterface])
            try Self.ip(["link", "set", hostInterface, "up"])
            try Self.ip(["-n", name, "addr", "add", innerAddress + "/30", "dev", inner])
            try Self.ip(["-n", name, "link", "set", inner, "up"])
            try Self.ip(["-n", name, "link", "set", "lo", "up"])
        } catch {
            remove()
            throw error
        }
    }

    deinit { remove() }

    /// The command prefix that runs a program in the namespace (network only).
    public var enter: [String] { ["/usr/bin/nsenter", "--net=/run/netns/\(name)", "--"] }

    /// Cuts the link: this side's end down.
    public func cut() throws { try Self.ip(["link", "set", hostInterface, "down"]) }

    /// Restores the link.
    public func restore() throws { try Self.ip(["link", "set", hostInterface, "up"]) }

    /// Deletes the namespace (and with it the pair). Safe to call more than once.
    public func remove() {
        if removed { return }
        removed = true
        try? Self.ip(["netns", "del", name])
        try? Self.ip(["link", "del", hostInterface])
        if guardPid > 0 {
            kill(guardPid, SIGKILL)
            _ = waitpid(guardPid, nil, 0)
        }
    }

    /// Whether the namespace still exists (for tests that check nothing is left behind).
    public static func exists(_ name: String) -> Bool {
        access("/run/netns/\(name)", F_OK) == 0
    }

    static func ip(_ arguments: [String]) throws {
        let out = "/tmp/coordfs-ip-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(out) }
        let pid = try EtcdCluster.spawn("/usr/sbin/ip", arguments, output: out)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        guard status == 0 else {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            throw EtcdFixtureError("ip \(arguments.joined(separator: " ")): \(text)")
        }
    }
}
