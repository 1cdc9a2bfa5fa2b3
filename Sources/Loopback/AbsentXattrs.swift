import Glibc
import FuseKit

/// Extended attributes a regular file is known not to have, kept in its node so that asking again
/// costs no system call.
///
/// Tools ask for a few attributes that files almost never have, for every file: `ls -l` asks
/// `security.selinux` and `system.posix_acl_access` of each entry, and the kernel asks
/// `security.capability` before an inode's first write and at each chown (FUSE has no cache for
/// them, and answering "not supported" would turn every extended attribute off). Without the
/// node's answer each such request opens the file by its handle, reads, and closes it (one read on
/// the descriptor of an open of the file through the mount, while there is one: the kernel's ask
/// before a write).
///
/// Only "no such attribute" (ENODATA) of the names in `names` is kept, and only where the backing
/// watcher keeps the file fresh (`Loopback.timeouts(forDevice:)`'s rule: every known directory watched,
/// the file on the backing root's local file system), for at most the watched attribute lifetime:
///   - no change of mode, owner, size or times can make an attribute appear (chown, a write and a
///     truncate only drop `security.capability`; chmod rewrites an ACL the file has), so only
///     setting one does: through the mount (`setxattr`, which forgets the node's answers), or
///     directly in the backing folder, which fanotify reports as ATTRIB and the watcher forgets
///     them for (`Loopback.xattrsMayHaveChanged`); lost events forget every node's
///     (`Loopback.forgetAbsentXattrs`); the document store's restores through `forgetCached`;
///   - an answer read while such a change was being told is not kept: the state carries a count of
///     forgettings, and the answer is kept only if none came between reading it and keeping it.
/// What the watcher cannot see (a name set through a hard link in a directory the kernel does not
/// know) is stale for at most the lifetime, as the kernel's cached attributes are.
///
/// The state is one word per node: the absent names (bits 0-7), the count of the node's
/// forgettings (bits 8-23), the low bits of the count of every node's forgettings when the answers
/// were read (bits 24-31) and the second the oldest kept answer was read, counted from the daemon's
/// start plus one (bits 32-63, 0: none kept). Every node's forgetting also notes its second: an
/// answer kept before it does not count even if 256 more came within a lifetime.
struct AbsentXattrs {
    /// The names whose absence is kept, by bit.
    static let names: [[UInt8]] = ["security.capability", "security.selinux", "system.posix_acl_access",
                                   "system.posix_acl_default"].map { Array($0.utf8) }

    /// The bit of `name` among `names`, or nil.
    static func index(of name: UnsafePointer<CChar>) -> Int? {
        let length = strlen(name)
        for (i, n) in names.enumerated() where n.count == length {
            var same = true
            for j in 0..<length where UInt8(bitPattern: name[j]) != n[j] { same = false; break }
            if same { return i }
        }
        return nil
    }

    /// When every node's answers were last forgotten: their count, and the second of the last.
    struct Forgotten: Equatable {
        var count: UInt64 = 0
        var second: UInt64 = 0
    }

    static let changeUnit: UInt64 = 1 << 8
    static let changeBits: UInt64 = 0xFFFF << 8

    @inline(__always)
    static func recorded(_ state: UInt64) -> UInt64 { state >> 32 }

    @inline(__always)
    private static func isCurrent(_ state: UInt64, now: UInt64, _ forgotten: Forgotten, lifetime: UInt64) -> Bool {
        let at = recorded(state)
        return at > forgotten.second && now &- at < lifetime && (state >> 24) & 0xFF == forgotten.count & 0xFF
    }

    /// True when `state` says the name of bit `index` is absent: kept after every node's answers
    /// were last forgotten (`forgotten`) and less than `lifetime` seconds before `now`.
    @inline(__always)
    static func isAbsent(_ state: UInt64, _ index: Int, now: UInt64, _ forgotten: Forgotten, lifetime: UInt64) -> Bool {
        state & (1 << UInt64(index)) != 0 && isCurrent(state, now: now, forgotten, lifetime: lifetime)
    }

    /// `state` with the name of bit `index` absent, read at `now` when every node's answers were
    /// last forgotten at `forgotten`: added to the answers still current, which keep their (older)
    /// second, or alone.
    @inline(__always)
    static func adding(_ index: Int, to state: UInt64, now: UInt64, _ forgotten: Forgotten, lifetime: UInt64) -> UInt64 {
        if isCurrent(state, now: now, forgotten, lifetime: lifetime) { return state | (1 << UInt64(index)) }
        return (now << 32) | ((forgotten.count & 0xFF) << 24) | (state & changeBits) | (1 << UInt64(index))
    }

    /// `state` with every answer forgotten and one more forgetting counted.
    @inline(__always)
    static func forgetting(_ state: UInt64) -> UInt64 { (state &+ changeUnit) & changeBits }
}
