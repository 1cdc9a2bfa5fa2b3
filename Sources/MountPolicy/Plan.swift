import Coordination

// The values the operation policy reads (facts an adapter looks up) and answers (plans an adapter
// performs). Nothing here does I/O, takes a lock or knows FUSE.

/// What an item is, as far as the policy cares (nil where it is used: no item).
public enum ItemKind: Hashable, Sendable {
    case file
    case directory
    /// A symbolic link, FIFO, device or socket.
    case other
}

/// A file just created through the mount that nobody has been told of yet, seen from the caller.
public enum Freshness: Hashable, Sendable {
    /// Not such a file.
    case told
    /// The caller created it moments ago: maybe a temp file.
    case byCaller
    /// Another process created it moments ago: this access tells its folder it appeared first.
    case byAnother
}

/// How a document left its name at the first half of a save.
public enum SaveDeparture: Hashable, Sendable {
    /// Renamed to `to`; `kept`: a name that stays after the save (not a temp name), which the
    /// folder's presenters are told appeared when the save completes.
    case renamed(to: ItemPath, kept: Bool)
    case deleted
}

/// The save recogniser's bookkeeping an operation settles (`SaveTracker`), in order.
public enum SaveStep: Hashable, Sendable {
    /// The caller's write opens of the path are told and ended first (close(2) does not wait for
    /// the kernel's RELEASE).
    case finishWrites(ItemPath)
    /// A document renamed to this path moments ago moved: no save is in progress (told now, so what
    /// comes next reaches it). A rename back to `unlessBackTo` is left to adoption.
    case moveArrives(ItemPath, unlessBackTo: ItemPath?)
    /// A file another process just created: its folder's presenters are told it appeared, now.
    case revealFresh(ItemPath)
    /// A file the caller just created and nobody was told of: it is a temp file, never told; if the
    /// operation fails, it stays and is told after all. When nothing was waiting any more (its
    /// window just closed), the adapter asks again with the file `.told`.
    case settleFresh(ItemPath)
}

/// What the document store is told. Each is called only when its path is a presented document
/// (`didMove`: a presented document at or below `from`) as looked at once the access is granted.
public enum StoreStep: Hashable, Sendable {
    case beforeInPlaceWrite(ItemPath)
    case beforeReplace(ItemPath)
    case beforeDelete(ItemPath)
    case didChange(ItemPath)
    case didDelete(ItemPath)
    case didMove(from: ItemPath, to: ItemPath)
}

/// One thing done after the change reached the backing folder.
public enum Step: Hashable, Sendable {
    case store(StoreStep)
    /// Told under the operation's access.
    case announce(AccessChange)
    /// Told under the adopted access of the save in progress (``Plan/adopts``).
    case announceAdopted(AccessChange)
    /// The caller finished saving this path: attributes it sets by path within the save window are
    /// part of that save.
    case saved(ItemPath)
    /// The access is kept by the save recogniser: the document may come back within the save window
    /// (then it is one save), else `departure` is told when the window closes. Without an access to
    /// keep, `otherwise` is told at once.
    case beginSave(ItemPath, SaveDeparture, otherwise: AccessChange)
    /// A new file its folder's presenters hear of once it outlives the save window or another
    /// process touches it.
    case appearsLater(ItemPath)
    /// The steps, when the path was a presented document once the access was granted.
    case ifPresented(ItemPath, [Step])
}

/// The answer for a name operation (unlink, rmdir, rename, mkdir/mknod/symlink/link) or a setattr
/// by path.
public struct Plan: Hashable, Sendable {
    /// Done first, before anything is coordinated.
    public var first: [SaveStep] = []
    /// The save in progress at this path is adopted: its held access is kept for the operation
    /// besides `intents`, and released after it. When none is in progress any more, the adapter asks
    /// again with the fact false.
    public var adopts: ItemPath?
    /// Coordinated together, before the change.
    public var intents: [FileAccessIntent] = []
    /// The store's hooks once granted, before the change reaches the backing folder.
    public var before: [StoreStep] = []
    /// After the change succeeded, in order.
    public var done: [Step] = []
    /// When the change failed: the fresh file settled by ``SaveStep/settleFresh(_:)`` is told after all.
    public var revealsSettledOnFailure = false

    public init(first: [SaveStep] = [], adopts: ItemPath? = nil, intents: [FileAccessIntent] = [], before: [StoreStep] = [],
                done: [Step] = [], revealsSettledOnFailure: Bool = false) {
        self.first = first; self.adopts = adopts; self.intents = intents; self.before = before
        self.done = done; self.revealsSettledOnFailure = revealsSettledOnFailure
    }
}

/// The answer for an open or a create: an access kept for the life of the file handle.
public struct HandlePlan: Hashable, Sendable {
    /// Done first, before anything is coordinated.
    public var first: [SaveStep] = []
    /// A save in progress at this path comes back: its held access becomes the handle's, instead of
    /// coordinating `intents` (and, for a create, without `parentIntents`).
    public var adopts: ItemPath?
    /// The handle's access.
    public var intents: [FileAccessIntent] = []
    /// A write (waits and deadlines of writes) or a read.
    public var write = false
    /// A create's access on the folder, for the create only, coordinated after the handle's.
    public var parentIntents: [FileAccessIntent] = []
    /// Told under the folder's access once created.
    public var created: [Step] = []
    /// The store's hooks once granted, before the backing file is opened.
    public var before: [StoreStep] = []
    /// Opened with O_TRUNC or created: a change even without a write.
    public var truncated = false
    /// A temp name: nothing is told about the handle.
    public var quiet = false
    /// A write that only appends (O_APPEND without O_TRUNC): it does not wait for other programs'
    /// files open for reading (``OperationPolicy/waits(write:pastOpenReaders:_:)``).
    public var appends = false

    public init(first: [SaveStep] = [], adopts: ItemPath? = nil, intents: [FileAccessIntent] = [], write: Bool = false,
                parentIntents: [FileAccessIntent] = [], created: [Step] = [], before: [StoreStep] = [],
                truncated: Bool = false, quiet: Bool = false, appends: Bool = false) {
        self.first = first; self.adopts = adopts; self.intents = intents; self.write = write
        self.parentIntents = parentIntents; self.created = created; self.before = before
        self.truncated = truncated; self.quiet = quiet; self.appends = appends
    }
}
