import ControlProtocol
import Foundation
import EventLog
import HummingbirdWebSocket
import Synchronization
import Linux

/// The live event stream of one WebSocket: the log read from a cursor on a thread of its own (the
/// reader blocks), its records sent as JSON batches `{"records":[...],"cursor":N}`. A page that
/// reconnects with `?after=CURSOR` gets exactly the records after the last one it had: nothing
/// lost, nothing twice (a range retention deleted meanwhile arrives as a `gap` record).
struct EventStream: Sendable {
    let backend: WebBackend
    /// Records shown to a page that connects without a cursor (its recent history).
    static let recent = 500
    /// Records per message.
    static let batch = 256
    /// The name of each stream's reader thread (comm: at most 15 bytes).
    static let threadName = "coordfs-stream"

    func run(after: UInt64?, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let source: any WebRecordSource
        do {
            source = try backend.openLog(after, Self.recent)
        } catch {
            try await outbound.write(.text(#"{"error":"cannot read the event log"}"#))
            return
        }
        let (stream, continuation) = AsyncStream<String>.makeStream()
        let state = PumpState(source, watch: backend.watch)
        // A thread of its own, not one of Dispatch's pool: the reader blocks, and with as many
        // pages open as the pool has threads, the next page would wait for one to close.
        let reader = Thread {
            nameCurrentThread(Self.threadName)
            Self.pump(state, continuation)
        }
        reader.start()
        defer {
            state.stopped.store(true, ordering: .relaxed)
            state.wake()
            continuation.finish()
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await _ in inbound {}  // the page sends nothing; this ends at its close
            }
            group.addTask {
                for await message in stream {
                    try await outbound.write(.text(message))
                    state.inFlight.subtract(1, ordering: .relaxed)
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Reads records and hands them on as messages until `stopped`; holds back while the page is
    /// slow (a bounded number of messages waiting), so memory stays bounded and nothing is dropped.
    private static func pump(_ state: PumpState, _ out: AsyncStream<String>.Continuation) {
        let source = state.source
        let formatter = EventFormatter(style: .json)
        var first = true
        while !state.stopped.load(ordering: .relaxed) {
            // Read before draining: the records written before the mount went away are sent first.
            let gone = state.watch.goneReason
            if state.inFlight.load(ordering: .relaxed) > 16 {
                _ = source.waitForChanges(timeout: .milliseconds(20))
                continue
            }
            var records: [UInt8] = []
            var n = 0
            do {
                while n < batch, let r = try source.next() {
                    if n > 0 { records.append(UInt8(ascii: ",")) }
                    var line: [UInt8] = []
                    formatter.append(r, to: &line)
                    while line.last == 10 { line.removeLast() }
                    records += line
                    n += 1
                }
            } catch {
                out.yield(#"{"error":"reading the event log failed"}"#)
                return
            }
            if n > 0 || first {
                // The first message says where the stream stands even when there is nothing yet.
                first = false
                state.inFlight.add(1, ordering: .relaxed)
                out.yield(#"{"cursor":"# + String(source.cursor) + #","records":["# + String(decoding: records, as: UTF8.self) + "]}")
            }
            if n < batch {
                if let gone {
                    // The last message: the page shows why and does not reconnect.
                    out.yield(String(decoding: JSONWriter.write(.object(JSONObject(["gone": .string(gone), "cursor": .int(Int64(clamping: source.cursor))]))), as: UTF8.self))
                    out.finish()
                    return
                }
                // Asleep until the log changes, the page goes (`stopped`) or the mount does: an
                // idle page's reader does not wake. The timeout only bounds a missed wake-up.
                _ = source.waitForChanges(timeout: .seconds(60), orReadable: [state.wakeDescriptor, state.watch.goneDescriptor])
            }
        }
    }
}

/// What the WebSocket's task and its reader thread share. The reader is used by that thread only.
private final class PumpState: @unchecked Sendable {
    let source: any WebRecordSource
    let watch: MountWatch
    let stopped = Atomic<Bool>(false)
    /// Messages handed on and not yet written to the socket.
    let inFlight = Atomic<Int>(0)
    /// Readable once the page is gone (`wake()`), so that the reader, asleep on the log, ends at once.
    private let pageGone = WakeUp()
    var wakeDescriptor: Int32 { pageGone.descriptor }
    init(_ source: any WebRecordSource, watch: MountWatch) {
        self.source = source
        self.watch = watch
    }
    func wake() { pageGone.signal() }
}
