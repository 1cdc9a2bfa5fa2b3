// Real etcd for the tests: one member or a three-member cluster of Debian's `etcd` (installed by
// the Makefile), on free loopback ports, with data under a temporary folder. `stop()` ends every
// member and removes the folder; a guard process per member does the same if the test process
// dies first (a crash, a SIGKILL), so no etcd and no data folder outlive the tests.
import Foundation
import Glibc

public struct EtcdFixtureError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

public final class EtcdCluster: @unchecked Sendable {
    public struct Member {
        public var name: String
        public var clientPort: UInt16
        public var peerPort: UInt16
        public var dataDir: String
        public var logFile: String
        public var clientURL: String { "\(tls ? "https" : "http")://\(EtcdCluster.host(of: self)):\(clientPort)" }
        var tls = false
        /// The address it listens on (127.0.0.1 unless the cluster was started on another one).
        var address: String
        var pid: pid_t = 0
        var guardPid: pid_t = 0
    }

    public private(set) var members: [Member]
    public let root: String
    private let lock = NSLock()
    private var stopped = false
    /// Root's password once `enableAuth` turned auth on.
    public private(set) var rootPassword: String?

    /// Client URLs of every member.
    public var endpoints: [String] { members.map(\.clientURL) }

    /// The members' process ids (0 for one not running).
    public var pids: [pid_t] { members.map(\.pid) }

    /// Client URLs of every member on another address it listens on (`alsoListenOn`).
    public func endpoints(on address: String) -> [String] { members.map { "http://\(address):\($0.clientPort)" } }

    static func host(of member: Member) -> String { member.address }

    /// Starts `size` members on free ports of `address` and waits until the cluster answers.
    /// `launcher` runs them through a command (`NetworkNamespace.enter`: inside a namespace, on
    /// its address); `alsoListenOn` are more addresses their client ports listen on (the host end
    /// of a namespace's veth pair, for a node inside it). `dataRoot`: the folder their data
    /// folders are made in (`/dev/shm`: on tmpfs, where etcd's fsyncs cost nothing).
    public init(
        size: Int = 1, address: String = "127.0.0.1", launcher: [String] = [], alsoListenOn: [String] = [],
        tls: TLSFiles? = nil, extraArguments: [String] = [], dataRoot: String = "/tmp"
    ) throws {
        guard let etcd = Self.etcdPath() else {
            throw EtcdFixtureError("etcd is not installed (make deps installs etcd-server)")
        }
        var template = Array("\(dataRoot)/coordfs-etcd-\(getpid())-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw EtcdFixtureError("mkdtemp failed: \(errno)") }
        root = String(cString: made)
        var members: [Member] = []
        for i in 0..<size {
            // Ports inside a namespace cannot be checked from here; its ports are all free.
            let ports = try Self.freePorts(2, address: launcher.isEmpty ? address : "127.0.0.1")
            members.append(
                Member(
                    name: "m\(i)", clientPort: ports[0], peerPort: ports[1], dataDir: root + "/m\(i).etcd",
                    logFile: root + "/m\(i).log", tls: tls != nil, address: address))
        }
        self.members = members
        self.etcd = etcd
        self.launcher = launcher
        self.alsoListenOn = alsoListenOn
        self.tls = tls
        self.extraArguments = extraArguments
        do {
            for i in members.indices { try launch(i, initial: true) }
            try waitUntilHealthy(timeout: 20)
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    private let etcd: String
    private let launcher: [String]
    private let alsoListenOn: [String]
    private let extraArguments: [String]
    private let tls: TLSFiles?

    /// PEM files for members serving their clients over TLS and asking for a client certificate.
    public struct TLSFiles: Sendable {
        public var ca: String, serverCertificate: String, serverKey: String
        public var clientCertificate: String, clientKey: String

        /// A CA, a certificate for 127.0.0.1 and a client certificate made with openssl in `folder`.
        public static func make(in folder: String) throws -> TLSFiles {
            let f = TLSFiles(
                ca: folder + "/ca.pem", serverCertificate: folder + "/server.pem", serverKey: folder + "/server.key",
                clientCertificate: folder + "/client.pem", clientKey: folder + "/client.key")
            let script = """
                set -e; cd '\(folder)'
                openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=coordfs-test-ca 2>/dev/null
                printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext
                for n in server client; do
                  openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null
                  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem -days 2 -extfile ext 2>/dev/null
                done
                """
            let pid = try EtcdCluster.spawn("/bin/sh", ["-c", script], output: folder + "/openssl.log")
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            guard status == 0 else { throw EtcdFixtureError("openssl failed: \((try? String(contentsOfFile: folder + "/openssl.log", encoding: .utf8)) ?? "")") }
            return f
        }
    }

    private func arguments(_ m: Member, initial: Bool) -> [String] {
        let cluster = members.map { "\($0.name)=http://\($0.address):\($0.peerPort)" }.joined(separator: ",")
        return [
            "--name", m.name, "--data-dir", m.dataDir,
            "--listen-client-urls", ([m.clientURL] + alsoListenOn.map { "http://\($0):\(m.clientPort)" }).joined(separator: ","),
            "--advertise-client-urls", m.clientURL,
            "--listen-peer-urls", "http://\(m.address):\(m.peerPort)",
            "--initial-advertise-peer-urls", "http://\(m.address):\(m.peerPort)",
            "--initial-cluster", cluster, "--initial-cluster-token", "coordfs-test-\(getpid())",
            "--initial-cluster-state", initial ? "new" : "existing",
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-outputs", "stderr",
        ] + (tls.map {
            [
                "--cert-file", $0.serverCertificate, "--key-file", $0.serverKey, "--trusted-ca-file", $0.ca,
                "--client-cert-auth",
            ]
        } ?? []) + extraArguments
    }

    private func launch(_ i: Int, initial: Bool) throws {
        let m = members[i]
        let command = launcher + [etcd] + arguments(m, initial: initial)
        let pid = try Self.spawn(command[0], Array(command.dropFirst()), output: m.logFile)
        // The guard: when this test process is gone, kill the member and remove the data.
        let script =
            "while kill -0 \(getpid()) 2>/dev/null; do sleep 0.5; done; kill -9 \(pid) 2>/dev/null; sleep 0.2; rm -rf '\(root)'"
        let guardPid = try Self.spawn("/bin/sh", ["-c", script], output: "/dev/null")
        lock.lock()
        members[i].pid = pid
        members[i].guardPid = guardPid
        lock.unlock()
    }

    /// Waits until every running member answers a read (which needs a leader).
    public func waitUntilHealthy(timeout: Double = 20, except: Set<Int> = []) throws {
        let deadline = Date().addingTimeInterval(timeout)
        for (i, m) in members.enumerated() where m.pid > 0 && !except.contains(i) {
            while !(tls == nil ? Self.answers(m.clientURL, rootPassword: rootPassword) : etcdctlAnswers(m.clientURL)) {
                if Date() > deadline {
                    let log = (try? String(contentsOfFile: m.logFile, encoding: .utf8)) ?? ""
                    throw EtcdFixtureError("etcd member \(m.name) did not answer in \(timeout) s; log tail: \(log.suffix(1500))")
                }
                if m.pid > 0, waitpid(m.pid, nil, WNOHANG) == m.pid {
                    lock.lock()
                    members[members.firstIndex { $0.name == m.name }!].pid = 0
                    lock.unlock()
                    let log = (try? String(contentsOfFile: m.logFile, encoding: .utf8)) ?? ""
                    throw EtcdFixtureError("etcd member \(m.name) exited; log tail: \(log.suffix(1500))")
                }
                usleep(50_000)
            }
        }
    }

    /// SIGKILLs member `i` (its data stays, so `restart` brings it back).
    public func kill(_ i: Int) {
        lock.lock()
        let pid = members[i].pid
        members[i].pid = 0
        lock.unlock()
        guard pid > 0 else { return }
        Glibc.kill(pid, SIGKILL)
        _ = waitpid(pid, nil, 0)
    }

    /// Sends `signal` to member `i` (SIGSTOP, SIGCONT).
    public func signal(_ i: Int, _ signal: Int32) {
        guard members[i].pid > 0 else { return }
        Glibc.kill(members[i].pid, signal)
        // kill(2) returns before a SIGSTOP has taken hold of every thread: one running on another
        // CPU may still answer a request sent right after (a keepAlive "answered by a stopped
        // etcd" on a loaded machine). Wait until each thread is stopped.
        if signal == SIGSTOP { Self.waitUntilStopped(members[i].pid, timeout: 5) }
    }

    /// Waits until every thread of `pid` is stopped (`T` in /proc/PID/task/TID/stat), or `timeout`.
    static func waitUntilStopped(_ pid: pid_t, timeout: Double) {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            let stopped = tasks.allSatisfy { tid in
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/stat", encoding: .utf8),
                      let close = stat.lastIndex(of: ")") else { return true } // gone
                let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
                return state == "T" || state == "t"
            }
            if stopped { return }
            usleep(2_000)
        }
    }

    /// Starts member `i` again on its data and ports and waits until the cluster answers.
    public func restart(_ i: Int) throws {
        if members[i].pid > 0 { return }
        if members[i].guardPid > 0 {
            Glibc.kill(members[i].guardPid, SIGKILL)
            _ = waitpid(members[i].guardPid, nil, 0)
        }
        try launch(i, initial: false)
        try waitUntilHealthy(timeout: 20)
    }

    /// Starts every stopped member again (after all were killed: none can elect a leader alone, so
    /// they start together) and waits until the cluster answers.
    public func restartAll() throws {
        for i in members.indices where members[i].pid == 0 {
            if members[i].guardPid > 0 {
                Glibc.kill(members[i].guardPid, SIGKILL)
                _ = waitpid(members[i].guardPid, nil, 0)
            }
            try launch(i, initial: false)
        }
        try waitUntilHealthy(timeout: 20)
    }

    /// etcd's data lost: every member killed, its data folder removed, and a new cluster started
    /// on the same addresses and ports (what an operator does who wipes etcd, or restores an older
    /// backup, under running clients). Its revisions count from 1 again; auth is off.
    public func restartEmpty() throws {
        for i in members.indices {
            kill(i)
            if members[i].guardPid > 0 {
                Glibc.kill(members[i].guardPid, SIGKILL)
                _ = waitpid(members[i].guardPid, nil, 0)
                members[i].guardPid = 0
            }
            try? FileManager.default.removeItem(atPath: members[i].dataDir)
        }
        rootPassword = nil
        for i in members.indices { try launch(i, initial: true) }
        try waitUntilHealthy(timeout: 20)
    }

    /// Runs etcdctl (API v3) against the members; returns its output, throws on failure.
    @discardableResult
    public func etcdctl(_ arguments: [String], user: String? = nil) throws -> String {
        var args = ["--endpoints", endpoints.joined(separator: ","), "--command-timeout", "5s"]
        if let tls { args += ["--cacert", tls.ca, "--cert", tls.clientCertificate, "--key", tls.clientKey] }
        if let user {
            args += ["--user", user]
        } else if let rootPassword {
            args += ["--user", "root:" + rootPassword]
        }
        let out = root + "/etcdctl.\(UInt32.random(in: 0...UInt32.max)).out"
        defer { unlink(out) }
        let pid = try Self.spawn("/usr/bin/etcdctl", args + arguments, output: out, environment: ["ETCDCTL_API=3"])
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        guard status == 0 else { throw EtcdFixtureError("etcdctl \(arguments.first ?? "") failed: \(text)") }
        return text
    }

    /// Whether a TLS member answers (etcdctl with the client certificate).
    func etcdctlAnswers(_ url: String) -> Bool {
        guard let tls else { return false }
        let pid = try? Self.spawn(
            "/usr/bin/etcdctl",
            [
                "--endpoints", url, "--cacert", tls.ca, "--cert", tls.clientCertificate, "--key", tls.clientKey,
                "--command-timeout", "1s", "endpoint", "health",
            ], output: "/dev/null", environment: ["ETCDCTL_API=3"])
        guard let pid else { return false }
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        return status == 0
    }

    /// The index of the member that leads now (asked of every running member with etcdctl), or nil
    /// while none does.
    public func leaderIndex() -> Int? {
        let running = members.indices.filter { members[$0].pid > 0 }
        guard !running.isEmpty,
            let text = try? etcdctl(["endpoint", "status", "--endpoints", running.map { members[$0].clientURL }.joined(separator: ",")])
        else { return nil }
        // One line per member: endpoint, ID, version, DB size, is leader, is learner, ...
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if fields.count > 4, fields[4] == "true" { return members.firstIndex { $0.clientURL == fields[0] } }
        }
        return nil
    }

    /// Turns on auth with a root user (role root) of password `password`.
    public func enableAuth(rootPassword password: String) throws {
        try etcdctl(["user", "add", "root", "--new-user-password", password, "--interactive=false"])
        try etcdctl(["user", "grant-role", "root", "root"])
        try etcdctl(["auth", "enable"])
        rootPassword = password
    }

    /// Compacts the store's history up to `revision`.
    public func compact(_ revision: Int64) throws {
        try etcdctl(["compaction", String(revision)])
    }

    /// Ends every member and its guard and removes the data. Safe to call more than once.
    public func stop() {
        lock.lock()
        if stopped {
            lock.unlock()
            return
        }
        stopped = true
        let all = members
        lock.unlock()
        for m in all where m.pid > 0 {
            Glibc.kill(m.pid, SIGCONT)
            Glibc.kill(m.pid, SIGTERM)
        }
        let deadline = Date().addingTimeInterval(5)
        for m in all where m.pid > 0 {
            var status: Int32 = 0
            while waitpid(m.pid, &status, WNOHANG) == 0 {
                if Date() > deadline {
                    Glibc.kill(m.pid, SIGKILL)
                    _ = waitpid(m.pid, &status, 0)
                    break
                }
                usleep(20_000)
            }
        }
        for m in all where m.guardPid > 0 {
            Glibc.kill(m.guardPid, SIGKILL)
            _ = waitpid(m.guardPid, nil, 0)
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    /// The tail of member `i`'s log, for a failure message.
    public func logTail(_ i: Int, bytes: Int = 2000) -> String {
        String(((try? String(contentsOfFile: members[i].logFile, encoding: .utf8)) ?? "").suffix(bytes))
    }

    // MARK: Helpers

    public static func etcdPath() -> String? {
        ["/usr/bin/etcd", "/usr/local/bin/etcd"].first { access($0, X_OK) == 0 }
    }

    /// Whether `url` answers `/v3/kv/range` (a linearizable read: a leader exists), asked over a
    /// plain socket with one-second timeouts.
    static func answers(_ url: String, rootPassword: String? = nil) -> Bool {
        guard let u = URL(string: url), let host = u.host, let port = u.port else { return false }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &addr.sin_addr)
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return false }
        // With auth on, a token is given only through the leader: asking for one proves there is one.
        let (path, body) =
            if let rootPassword {
                ("/v3/auth/authenticate", #"{"name":"root","password":"\#(rootPassword)"}"#)
            } else {
                ("/v3/kv/range", #"{"key":"AA=="}"#)
            }
        let request = "POST \(path) HTTP/1.0\r\nHost: \(host)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        let sent = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        guard sent > 0 else { return false }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            response += buffer[0..<n]
        }
        let text = String(decoding: response, as: UTF8.self)
        return text.hasPrefix("HTTP/1.0 200") || text.hasPrefix("HTTP/1.1 200") ? text.contains(rootPassword == nil ? "\"header\"" : "\"token\"") : false
    }

    /// `count` distinct free TCP ports on `address` (bound and released: etcd binds them next).
    static func freePorts(_ count: Int, address: String) throws -> [UInt16] {
        var ports: [UInt16] = []
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw EtcdFixtureError("socket: \(errno)") }
            fds.append(fd)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = 0
            inet_pton(AF_INET, address, &addr.sin_addr)
            let bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else { throw EtcdFixtureError("bind \(address): \(errno)") }
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
            }
            ports.append(UInt16(bigEndian: addr.sin_port))
        }
        return ports
    }

    static func spawn(_ executable: String, _ arguments: [String], output: String, environment: [String] = []) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var env: [String] = []
        var e = environ
        while let p = e.pointee {
            env.append(String(cString: p))
            e += 1
        }
        let envp: [UnsafeMutablePointer<CChar>?] = (env + environment).map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard rc == 0 else { throw EtcdFixtureError("cannot start \(executable): \(rc)") }
        return pid
    }
}
