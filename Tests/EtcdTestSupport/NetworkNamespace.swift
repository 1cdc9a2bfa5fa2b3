// A network namespace joined to this one by a veth pair, for partitions made on this machine:
// `hostAddress` is this side's end, `innerAddress` the namespace's; `cut()` sets this side's end
// down (nothing passes either way), `restore()` sets it up again. Processes run inside with
// `nsenter --net` (only the network namespace: their FUSE mounts stay visible here). `remove()`
// deletes the namespace and the pair; a guard process does it if the test process dies first.
import Foundation
import Glibc

public final class NetworkNamespace: @unchecked Sendable {
    /// One veth pair: `hostAddress` on this side, `innerAddress` in the namespace.
    public struct Link: Sendable {
        public var hostInterface: String
        public var hostAddress: String
        public var innerAddress: String
    }

    public let name: String
    public let links: [Link]
    public var hostInterface: String { links[0].hostInterface }
    public var hostAddress: String { links[0].hostAddress }
    public var innerAddress: String { links[0].innerAddress }
    private var guardPid: pid_t = 0
    private var removed = false

    nonisolated(unsafe) private static var counter = 0

    /// A namespace with `links` veth pairs to this one (several: one per node that reaches a
    /// process inside, each cut on its own).
    public init(links count: Int = 1) throws {
        Self.counter += 1
        let tag = "\(getpid() % 100_000)x\(Self.counter)"
        name = "coordfs-\(tag)"
        var links: [Link] = []
        for i in 0..<count {
            // A /30 in 10.213.0.0/16 picked from the pid, the counter and the link.
            let base = ((Int(getpid()) * 7 + Self.counter * 5 + i) % 16_000) * 4
            links.append(
                Link(
                    hostInterface: "cfh\(tag)\(i)", hostAddress: "10.213.\(base / 256).\(base % 256 + 1)",
                    innerAddress: "10.213.\(base / 256).\(base % 256 + 2)"))
        }
        self.links = links
        do {
            try Self.ip(["netns", "add", name])
            let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 0.5; done; ip netns del '\(name)' 2>/dev/null"
            guardPid = try EtcdCluster.spawn("/bin/sh", ["-c", script], output: "/dev/null")
            try Self.ip(["-n", name, "link", "set", "lo", "up"])
            for (i, link) in links.enumerated() {
                let inner = "cfn\(tag)\(i)"
                try Self.ip(["link", "add", link.hostInterface, "type", "veth", "peer", "name", inner])
                try Self.ip(["link", "set", inner, "netns", name])
                try Self.ip(["addr", "add", link.hostAddress + "/30", "dev", link.hostInterface])
                try Self.ip(["link", "set", link.hostInterface, "up"])
                try Self.ip(["-n", name, "addr", "add", link.innerAddress + "/30", "dev", inner])
                try Self.ip(["-n", name, "link", "set", inner, "up"])
            }
        } catch {
            remove()
            throw error
        }
    }

    deinit { remove() }

    /// The command prefix that runs a program in the namespace (network only).
    public var enter: [String] { ["/usr/bin/nsenter", "--net=/run/netns/\(name)", "--"] }

    /// Cuts link `i`: this side's end down.
    public func cut(_ i: Int = 0) throws { try Self.ip(["link", "set", links[i].hostInterface, "down"]) }

    /// Restores link `i`.
    public func restore(_ i: Int = 0) throws { try Self.ip(["link", "set", links[i].hostInterface, "up"]) }

    /// Deletes the namespace (and with it the pair). Safe to call more than once.
    public func remove() {
        if removed { return }
        removed = true
        try? Self.ip(["netns", "del", name])
        for link in links { try? Self.ip(["link", "del", link.hostInterface]) }
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
