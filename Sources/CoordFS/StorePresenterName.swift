import DocumentStore
import Glibc

/// Who a conflict's presenter name (`StorePresenterID`, the store's persisted name) stands for, read
/// back from the names the daemon gives: `coordfs-PID-START-BOOT/presenter#N`, presenter N of a
/// daemon (`StoreService.storeID(of:)`), and `process:PID:START:uid:UID`, a process whose save went
/// over a change (`StoreService.saverName`). For what `coordfs conflicts` shows people (the
/// presenter as `coordfs status` shows it: its process and user), where the name itself is long and
/// internal.
public enum StorePresenterName: Sendable, Equatable {
    /// Presenter `presenter` of a daemon; `daemonRuns`: that daemon still runs in this boot (its
    /// presenters may still be registered: `coordfs status` lists them), else it is gone and so are they.
    case presenter(PresenterID, daemonRuns: Bool)
    /// The process `pid` of user `uid` whose save made a lost update; `running`: whether it still
    /// runs (the same process: what tells it from others of its pid, `processStart`, is the one
    /// its name keeps), nil when that was not known.
    case saver(pid: Int32, uid: UInt32, running: Bool?)
    /// A name of another kind (an integrator's own).
    case other

    public init(_ name: StorePresenterID) {
        let raw = name.rawValue
        if let uid = StoreService.saverUID(name) {
            let parts = raw.split(separator: ":")
            guard let pid = Int32(parts[1]) else { self = .other; return }
            self = .saver(pid: pid, uid: uid, running: UInt64(parts[2]).map { processStart(pid) == $0 })
            return
        }
        let halves = raw.split(separator: "/")
        guard halves.count == 2, halves[0].hasPrefix("coordfs-"), halves[1].hasPrefix("presenter#"),
              let number = UInt64(halves[1].dropFirst("presenter#".count)) else { self = .other; return }
        self = .presenter(PresenterID(number), daemonRuns: StoreService.daemonRuns(named: name))
    }
}
