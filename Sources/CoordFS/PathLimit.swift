import ControlProtocol
import Coordination
import NameBytes

/// How deep coordination goes (docs/semantics.md, "Deep paths"). The mount finds the path of an item
/// at any depth (`Loopback.pathBytes`, beyond PATH_MAX too); a path is coordinated while it fits
/// the control protocol, which carries it to presenters, and the event log (64 KiB, `MountPath.maxLength`).
/// An operation on an item deeper than that fails with ENAMETOOLONG: it is never done uncoordinated.
enum PathLimit {
    static let maxBytes = MountPath.maxLength

    /// Whether `path` (as `a/b/c`) is at most `maxBytes` long.
    static func fits(_ path: ItemPath) -> Bool {
        let components = path.components
        // A name is at most 255 bytes: this many components always fit.
        if components.count * 256 <= maxBytes + 1 { return true }
        var bytes = -1
        for c in components {
            bytes += LosslessName.byteCount(c) + 1   // the name's bytes (a byte that is not UTF-8 is one)
            if bytes > maxBytes { return false }
        }
        return true
    }
}
