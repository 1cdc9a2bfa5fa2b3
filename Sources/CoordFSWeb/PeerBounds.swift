import Glibc
import HummingbirdCore
import LinuxGNU
import Logging
import NIOCore
import Synchronization

/// Who is at the other end of a connection to the page's server: on this machine, the user owning
/// the peer's socket (every local user can reach a loopback port); from elsewhere (`--listen` on
/// another address), its IP address.
enum PeerKey: Hashable, Sendable {
    case user(UInt32)
    case address([UInt8])

    /// The peer of a connection from `remote` to this server's `local` address.
    static func of(remote: SocketAddress?, local: SocketAddress?) -> PeerKey {
        guard let r = remote.flatMap(parts) else { return .address([]) }
        if let l = local.flatMap(parts), l.family == r.family,
           let uid = LinuxCalls.tcpSocketOwner(family: r.family, address: r.address, port: r.port, peer: l.address, peerPort: l.port) {
            return .user(uid)
        }
        return .address(r.address)
    }

    private static func parts(_ a: SocketAddress) -> (family: Int32, address: [UInt8], port: UInt16)? {
        switch a {
        case .v4(let v4):
            var sin = v4.address
            return (AF_INET, withUnsafeBytes(of: &sin.sin_addr) { Array($0) }, UInt16(bigEndian: sin.sin_port))
        case .v6(let v6):
            var sin6 = v6.address
            return (AF_INET6, withUnsafeBytes(of: &sin6.sin6_addr) { Array($0) }, UInt16(bigEndian: sin6.sin6_port))
        default:
            return nil
        }
    }
}

/// How many connections each peer may hold open at once (docs/web.md, "Security"). A connection is
/// counted from its accept, before a byte of it is read: a local user without the token can open
/// connections and send nothing (or a request head a byte at a time), and each holds one of the
/// server's descriptors for as long as it stays open. Without a bound, another user's few hundred
/// idle connections used up `coordfs web`'s descriptors, and the page of the user who started it
/// (its requests, its live connection) got no answer. Root and the server's own user are not
/// bounded (the page's user; a user's browser holds a handful of connections, one per open page
/// for the live stream); every other peer gets `perPeer`, and all of them together
/// `othersTotal`, so that the server's own user keeps descriptors to spare.
final class PeerConnections: Sendable {
    let perPeer: Int
    let othersTotal: Int
    let exempt: Set<UInt32>
    private let held = Mutex<(byPeer: [PeerKey: Int], total: Int)>(([:], 0))

    /// Connections one other user (or one remote address) may hold open at once.
    static let defaultPerPeer = 128

    init(perPeer: Int = PeerConnections.defaultPerPeer, othersTotal: Int = PeerConnections.othersTotal(), exempt: Set<UInt32> = [0, getuid()]) {
        self.perPeer = perPeer
        self.othersTotal = othersTotal
        self.exempt = exempt
    }

    /// All other peers' connections together: the descriptor limit less 128 for the server's own
    /// user and the server itself (at least one peer's worth).
    static func othersTotal() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return defaultPerPeer }
        let soft = Int(min(limit.rlim_cur, 1 << 30))
        return max(defaultPerPeer, soft - 128)
    }

    /// Whether `peer` may hold one more connection; if so it is counted until `release`.
    func admit(_ peer: PeerKey) -> Bool {
        if case .user(let uid) = peer, exempt.contains(uid) { return true }
        return held.withLock { h in
            let n = h.byPeer[peer, default: 0]
            guard n < perPeer, h.total < othersTotal else { return false }
            h.byPeer[peer] = n + 1
            h.total += 1
            return true
        }
    }

    /// One of `peer`'s admitted connections closed.
    func release(_ peer: PeerKey) {
        if case .user(let uid) = peer, exempt.contains(uid) { return }
        held.withLock { h in
            guard let n = h.byPeer[peer] else { return }
            h.byPeer[peer] = n > 1 ? n - 1 : nil
            h.total -= 1
        }
    }

    /// Connections held by `peer` now.
    func count(_ peer: PeerKey) -> Int { held.withLock { $0.byPeer[peer, default: 0] } }
}

/// A server's child channel with `PeerBound` first in its pipeline, put there when the connection
/// is accepted (Hummingbird's own "additional" handlers come only after a request head was read,
/// which an idle connection never sends), and the bounds of a request head and the answer to a
/// malformed one around the inner channel's HTTP decoder (`RequestBounds`).
struct PeerBoundChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let peers: PeerConnections
    let inner: Inner

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            try channel.pipeline.syncOperations.addHandler(PeerBound(peers: peers), position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            try RequestBounds.install(in: channel)
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// The first handler of every connection: counts it against its peer's bound (`PeerConnections`)
/// once it is accepted, and closes it at once, before reading anything, when the peer holds its
/// share already. The count ends when the connection closes (also after an upgrade to a
/// WebSocket, which removes the HTTP handlers).
final class PeerBound: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let peers: PeerConnections
    private var checked = false

    init(peers: PeerConnections) { self.peers = peers }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { check(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        if check(context) { context.fireChannelActive() }
    }

    /// Whether the connection may stay.
    @discardableResult
    private func check(_ context: ChannelHandlerContext) -> Bool {
        if checked { return context.channel.isActive }
        checked = true
        let peer = PeerKey.of(remote: context.channel.remoteAddress, local: context.channel.localAddress)
        guard peers.admit(peer) else {
            context.close(promise: nil)
            return false
        }
        let peers = self.peers
        context.channel.closeFuture.whenComplete { _ in peers.release(peer) }
        return true
    }
}
