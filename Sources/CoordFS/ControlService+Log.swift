import ControlProtocol
import Coordination
import EventLog
import Synchronization

// `readLog` (docs/protocol.md, "The event log"): the log's files are the daemon's user's alone;
// anyone else reads through the daemon, which passes on only the records naming items the peer
// may see (Visibility.swift).

/// A connection's reader of the log, kept between `readLog` requests so that a follower going on
/// from where it stopped costs no new scan. Only touched from the connection's serial queue.
final class ConnectionLogReader: @unchecked Sendable {
    let reader: EventLogReader
    init(_ reader: EventLogReader) { self.reader = reader }
}

extension ControlRequestHandler {
    /// How much one reply may carry: its base64 must fit in a frame.
    static let logReplyBytes = 512 * 1024
    /// Frames read per request at most, shown, hidden or passed on the way to `from` (bounds the
    /// work of one request, whatever the log's size: a reply that stopped there has `next` below
    /// `end`, and the client asks again from it, on the same reader).
    static let logScanLimit = 50_000

    func readLog(_ request: ReadLog, _ client: ControlClientState) {
        let connection = client.connection
        guard let directory = logDirectory, let index = logIndex else {
            connection.reply(to: request.id, error: ProtocolError(.logUnavailable, "this mount keeps no event log (log=off)"))
            return
        }
        do {
            // The writer's bounds and index, in memory: no request scans the log for them, and
            // a reader opened at any seq seeks to it (SeekIndex.swift).
            let bounds = index.bounds
            let reader = try client.logReader(directory: directory, index: index, from: request.from)
            let limit = Int(request.limit ?? ReadLog.maxLimit)
            var shown = 0
            var frames: [UInt8] = []
            var visible = VisibilityMemo(resolver: resolver, peer: client.peer)
            reader.reader.frameBudget = Self.logScanLimit
            while shown < limit, frames.count < Self.logReplyBytes, let record = try reader.reader.next() {
                guard visible.maySee(record) else { continue }
                RecordFrames.append(record, to: &frames)
                shown += 1
            }
            connection.send(.logRecords(LogRecords(
                id: request.id, records: frames, next: reader.reader.cursor &+ 1, end: bounds.nextSeq, oldest: bounds.oldestSeq)))
        } catch {
            connection.reply(to: request.id, error: ProtocolError(.logUnavailable, "cannot read the event log: \(error)"))
        }
    }
}

extension ControlClientState {
    /// The connection's log reader, positioned so that its next record is `from` (nil: the end).
    func logReader(directory: String, index: EventLogIndex, from: UInt64?) throws -> ConnectionLogReader {
        if let from, let kept = logReaderBox.withLock({ $0 }), kept.reader.cursor &+ 1 == from {
            return kept
        }
        let position: EventLogPosition = from.map { $0 <= 1 ? .start : .from($0) } ?? .end
        let made = ConnectionLogReader(try EventLogReader(directory: directory, position: position, index: index))
        logReaderBox.withLock { $0 = made }
        return made
    }
}

/// The visibility rule, remembered per folder within one request (what a peer may see depends
/// only on the folders above an item): log records, and the items a status or cluster report
/// lists, cost the resolver's walk once per folder, not once per item.
struct VisibilityMemo {
    let resolver: ControlPathResolver
    let peer: ControlPathResolver.Peer
    private var folders: [Substring: Bool] = [:]
    private var mountFolders: [String: Bool] = [:]
    /// Questions the resolver was asked (each walks the item's folders on disk).
    private(set) var lookups = 0

    init(resolver: ControlPathResolver, peer: ControlPathResolver.Peer) {
        self.resolver = resolver
        self.peer = peer
    }

    /// Whether the peer may see every item `record` names (records naming only the root, such as
    /// gaps and recoveries, are for everyone).
    mutating func maySee(_ record: EventRecord) -> Bool {
        if peer.credentials.uid == 0 { return true }
        return maySee(record.path) && (record.oldPath.map { maySee($0) } ?? true)
    }

    /// `path` as the log writes it: `/` then the components.
    mutating func maySee(_ path: String) -> Bool {
        let relative = path.drop { $0 == "/" }
        if relative.isEmpty { return true }
        let folder = relative.lastIndex(of: "/").map { relative[..<$0] } ?? ""
        // The state folder's name in the root is no item of the mount: never a folder's answer.
        let stateFolder = folder.isEmpty && relative == StateFolder.name
        if !stateFolder, let known = folders[folder] { return known }
        guard let mountPath = try? MountPath(validating: String(relative)) else { return false }
        if stateFolder { return resolver.maySee(mountPath, for: peer) }
        lookups += 1
        let answer = resolver.maySee(mountPath, for: peer)
        folders[folder] = answer
        return answer
    }

    /// An item of the mount (a presenter's, an access's).
    mutating func maySee(_ path: MountPath) -> Bool {
        if peer.credentials.uid == 0 || path.isRoot { return true }
        let folder = path.parent?.rawValue ?? ""
        if folder.isEmpty && path.rawValue == StateFolder.name { return resolver.maySee(path, for: peer) }
        if let known = mountFolders[folder] { return known }
        lookups += 1
        let answer = resolver.maySee(path, for: peer)
        mountFolders[folder] = answer
        return answer
    }

    /// An item of the coordinator's (nil when it is outside the mount: root's alone).
    mutating func maySee(_ path: ItemPath) -> Bool {
        guard let mountPath = MountPath.of(path) else { return peer.credentials.uid == 0 }
        return maySee(mountPath)
    }
}
