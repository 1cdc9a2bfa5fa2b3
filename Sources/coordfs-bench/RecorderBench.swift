import Coordination
import CoordFS
import EventLog
import Foundation

/// `coordfs-bench recorder [--files N]`
///
/// What the daemon's event recorder costs per record, without a mount: the coordination events of a
/// metadata workload (per file: a create's two requests, an unlink's request, 12 records) recorded
/// as a FUSE thread records them, then formatted and encoded as the worker that holds /dev/fuse does
/// between requests (`help`, 24 steps at a time). The log writer thread writes them to a temporary
/// directory meanwhile.
enum RecorderBench {
    static func run(_ args: [String]) async throws {
        var files = 100_000
        var i = 0
        while i < args.count {
            switch args[i] {
            case "--files" where i + 1 < args.count:
                files = max(1, Int(args[i + 1]) ?? files)
                i += 1
            default:
                throw EventLogError.invalidArgument("usage: coordfs-bench recorder [--files N]")
            }
            i += 1
        }
        let dir = NSTemporaryDirectory() + "/coordfs-recorder-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try EventLogWriter(directory: dir)
        let recorder = EventRecorder(log: log)
        // Only `help` formats here (the writer thread would otherwise take batches too, and its lock
        // contention would be measured instead); the writer still writes.
        log.setSource(nil)
        let origin = AccessOrigin(pid: 4242, uid: 1000, gid: 1000, executable: "python3")
        let folder = try ItemPath("projects/w4242")

        // The events of one file, as the coordinator emits them.
        func events(_ n: Int) throws -> [CoordinationEvent] {
            let file = try ItemPath("projects/w4242/f\(n)")
            let create = FileAccessIntent.writingIntent(with: file)
            let parent = FileAccessIntent.writingIntent(with: folder)
            let delete = FileAccessIntent.writingIntent(with: file, options: .forDeleting)
            let (r1, r2, r3) = (RequestID(rawValue: UInt64(3 * n + 1)), RequestID(rawValue: UInt64(3 * n + 2)), RequestID(rawValue: UInt64(3 * n + 3)))
            let time = CoordinationEvent.now()
            func e(_ r: RequestID, _ kind: CoordinationEvent.Kind) -> CoordinationEvent {
                CoordinationEvent(time: time, requestID: r, origin: origin, kind: kind)
            }
            return [
                e(r1, .requested(intents: [create], purpose: nil)), e(r1, .granted(intents: [create], waitedNanos: 0)),
                e(r2, .requested(intents: [parent], purpose: nil)), e(r2, .granted(intents: [parent], waitedNanos: 0)),
                e(r2, .announced(.subitemAppeared(file))), e(r2, .released(heldNanos: 20_000)),
                e(r1, .announced(.changed(file))), e(r1, .released(heldNanos: 70_000)),
                e(r3, .requested(intents: [delete], purpose: nil)), e(r3, .granted(intents: [delete], waitedNanos: 0)),
                e(r3, .announced(.deleted(file))), e(r3, .released(heldNanos: 30_000)),
            ]
        }
        let perFile = try events(0)
        let batches = 4  // files per round
        var recordSeconds = 0.0
        var helpSeconds = 0.0
        var stepsFormatted = 0
        var n = 0
        while n < files {
            let round = try (n..<min(files, n + batches)).flatMap(events)
            var t0 = now()
            for (k, e) in round.enumerated() {
                recorder.record(e)
                if k % 24 == 23 {
                    recordSeconds += now() - t0
                    t0 = now()
                    while recorder.help() {}
                    helpSeconds += now() - t0
                    t0 = now()
                }
            }
            recordSeconds += now() - t0
            n += batches
        }
        stepsFormatted = recorder.helped.load(ordering: .relaxed)

        // The same steps made by the coordinator: what the sink adds to an access on the FUSE thread
        // (the event built under the coordinator's lock, and `record`), the formatting left out.
        let accesses = files * 3
        let bare = coordinatorNanos(Coordinator(), origin, folder, accesses: accesses, recorder: nil)
        let logged = coordinatorNanos(Coordinator(eventSink: recorder as any CoordinationEventSink), origin, folder, accesses: accesses, recorder: recorder)
        try recorder.flush()
        let stored = log.lastAssignedSeq
        try log.close()
        let steps = files * perFile.count

        print("## Event recorder (\(files) files of a metadata workload, \(perFile.count) steps and records each)")
        print("")
        print("| measurement | result |")
        print("|---|---|")
        print(String(format: "| record a step (a FUSE thread, under the coordinator's lock) | %.0f ns per step |", recordSeconds / Double(steps) * 1e9))
        print(String(format: "| format and encode between requests (`help`) | %.0f ns per record (%d of %d steps) |",
                     helpSeconds / Double(max(1, stepsFormatted)) * 1e9, stepsFormatted, steps))
        print(String(format: "| an uncontended write with a didChange through the coordinator, no sink | %.0f ns per access |", bare))
        print(String(format: "| the same with the recorder as the sink (4 steps per access) | %.0f ns per access (+%.0f ns) |", logged, logged - bare))
        print("| records stored | \(stored) |")
        print("")
    }

    /// Wall time per access (tryCoordinateImmediately, didChange, release) of `accesses` uncontended
    /// writes, each to its own file; with a recorder, its backlog is formatted every 6 accesses
    /// outside the timed part.
    private static func coordinatorNanos(
        _ coordinator: Coordinator, _ origin: AccessOrigin, _ folder: ItemPath, accesses: Int, recorder: EventRecorder?
    ) -> Double {
        let intents = (0..<1000).map { FileAccessIntent.writingIntent(with: try! folder.appending("f\($0)")) }
        var elapsed = 0.0
        var n = 0
        while n < accesses {
            let t0 = now()
            for k in n..<min(accesses, n + 6) {
                let intent = intents[k % intents.count]
                guard let access = coordinator.tryCoordinateImmediately(intent, origin: origin) else {
                    fatalError("uncontended write was refused")
                }
                access.didChange(intent.path)
                access.release()
            }
            elapsed += now() - t0
            n += 6
            if let recorder { while recorder.help() {} }
        }
        return elapsed / Double(accesses) * 1e9
    }

    private static func now() -> Double { Double(CoordinationEvent.now()) / 1e9 }
}
