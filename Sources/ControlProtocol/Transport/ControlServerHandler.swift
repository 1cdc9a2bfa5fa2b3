/// What the daemon implements to serve the control socket. One handler serves every
/// connection; each connection's calls arrive in order on that connection's own serial queue
/// (different connections run concurrently), so a slow handler for one client never stalls
/// another, and the socket thread never waits for a handler.
///
/// The transport answers `hello` (version negotiation), `close`, answers to asks sent with
/// `ControlConnection.ask`, framing and syntax errors, and messages sent the wrong way. Everything
/// else (`register`, `unregister`, `coordinate`, `release`, `status`, stray `answer`s and client
/// `error`s) reaches `didReceive`; reply with `connection.send(_:)` echoing the request id.
package protocol ControlServerHandler: AnyObject, Sendable {
    /// A client completed `hello`; `connection.version` is set.
    func controlServer(_ server: ControlServer, didOpen connection: ControlConnection)
    /// A decoded request from a negotiated client.
    func controlServer(_ server: ControlServer, didReceive message: ControlMessage, on connection: ControlConnection)
    /// The connection is gone (the last call for it). Asks pending on it have already completed
    /// with `.disconnected`. Called at once on disconnect, also for connections that never
    /// completed `hello`.
    func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason)
    /// Whether the connection holds nothing (no presenter, access or waiting request), so that it
    /// may be closed once idle for `Configuration.idleTimeout`. Called on the connection's queue.
    func controlServer(_ server: ControlServer, holdsNothing connection: ControlConnection) -> Bool
}

extension ControlServerHandler {
    package func controlServer(_ server: ControlServer, holdsNothing connection: ControlConnection) -> Bool { true }
    package func controlServer(_ server: ControlServer, didOpen connection: ControlConnection) {}
    package func controlServer(_ server: ControlServer, didClose connection: ControlConnection, reason: ControlConnection.CloseReason) {}
}

/// How an ask sent with `ControlConnection.ask` ended.
package enum AskOutcome: Sendable, Equatable {
    /// The presenter answered that it did what was asked.
    case answered(latencyNanoseconds: UInt64)
    /// The presenter answered with an error.
    case failed(ErrorBody, latencyNanoseconds: UInt64)
    /// No answer before the deadline. A late answer is ignored.
    case timedOut
    /// The connection closed before an answer (the presenter is gone).
    case disconnected
}
