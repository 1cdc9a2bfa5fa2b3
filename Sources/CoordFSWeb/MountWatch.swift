import Synchronization

/// Whether the mount `coordfs web` shows is still there. The command watches the mount (its
/// daemon's control socket and the mount table) and says here when it is gone; the server then
/// tells every live page why (`{"gone":"…"}` on the event stream), answers the API with 503, and
/// stops, so the command exits with a message and a non-zero status (docs/web.md, "When the
/// mount goes away").
public final class MountWatch: Sendable {
    private let state = Mutex<String?>(nil)

    public init() {}

    /// Why the mount is gone; nil while it is there.
    public var goneReason: String? { state.withLock { $0 } }

    /// Records that the mount is gone (the first reason stays).
    public func markGone(_ reason: String) {
        state.withLock { if $0 == nil { $0 = reason } }
    }
}
