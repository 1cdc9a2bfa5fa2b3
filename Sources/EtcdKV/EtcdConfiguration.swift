import Foundation

/// How to reach an etcd cluster: its client endpoints (tried in turn, the one that answered last
/// first), TLS and user/password authentication, and how long a call may take.
public struct EtcdConfiguration: Sendable {
    /// Client URLs, `http://host:port` or `https://host:port`, one per member (or a proxy).
    public var endpoints: [String]
    /// TLS material (PEM files). Needed for `https://` endpoints signed by a private CA or asking
    /// for a client certificate; without it the system's roots are trusted and no certificate is shown.
    public var tls: TLS?
    /// etcd user and password; the client asks etcd for a token (`/v3/auth/authenticate`) and
    /// sends it with every call, asking again when etcd says it expired.
    public var credentials: Credentials?
    /// How long a connection attempt to one endpoint may take before the next is tried.
    public var connectTimeout: Duration
    /// How long one call (on one endpoint) may take; a watch is not bounded by it.
    public var requestTimeout: Duration
    /// How often a watch checks that its member still serves (a linearizable read there), so a
    /// member stopped, cut off or without a leader does not keep a watch silent; nil: never.
    public var watchProbeInterval: Duration?

    public init(
        endpoints: [String], tls: TLS? = nil, credentials: Credentials? = nil,
        connectTimeout: Duration = .seconds(1), requestTimeout: Duration = .seconds(3),
        watchProbeInterval: Duration? = .seconds(2)
    ) {
        self.watchProbeInterval = watchProbeInterval
        self.endpoints = endpoints
        self.tls = tls
        self.credentials = credentials
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
    }

    public struct TLS: Sendable, Hashable {
        /// The CA certificate(s) that signed the members' certificates; nil: the system's roots.
        public var caFile: String?
        /// The client certificate and its key, for members started with `--client-cert-auth`.
        public var certificateFile: String?
        public var keyFile: String?

        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    /// A user name and its password. The password is never shown: not by `description`, not in
    /// an error, not in a log line.
    public struct Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
        public var user: String
        let password: String

        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }

        /// The password is the file's first line (a trailing newline is not part of it).
        public init(user: String, passwordFile: String) throws {
            guard let data = FileManager.default.contents(atPath: passwordFile),
                let text = String(data: data, encoding: .utf8)
            else {
                throw EtcdConfigurationError.unreadablePasswordFile(passwordFile)
            }
            let firstLine = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            self.init(user: user, password: String(firstLine.hasSuffix("\r") ? firstLine.dropLast() : firstLine))
        }

        public var description: String { "user \(user), password withheld" }
        public var debugDescription: String { description }
    }
}

public enum EtcdConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    case noEndpoints
    case badEndpoint(String)
    case unreadablePasswordFile(String)
    case tls(String)

    public var description: String {
        switch self {
        case .noEndpoints: "no etcd endpoint given"
        case .badEndpoint(let e): "etcd endpoint \(e) is not http://host:port or https://host:port"
        case .unreadablePasswordFile(let p): "cannot read the etcd password file \(p)"
        case .tls(let m): "etcd TLS: \(m)"
        }
    }
}
