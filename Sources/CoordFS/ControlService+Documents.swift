import NameBytes
import ControlProtocol
import Coordination
import Dispatch
import DocumentStore
import Glibc
import Linux
import LinuxGNU

// The document store over the control socket (docs/protocol.md, "The document store"): a
// presenter's unsaved flag, `documentChanged` notifications, conflicts and their resolution, and
// kept versions. Only a presenter's own connection may set its flag or resolve its conflicts (root
// may resolve any); every path is checked with the peer's credentials like the rest of the protocol.


extension ControlRequestHandler {
    // MARK: documentChanged

    /// Forwards one store event to the connection holding its presenter (store observer queue).
    func forward(_ event: DocumentChangeEvent) {
        guard let presenter = event.presenter, var path = MountPath.of(event.path) else { return }
        guard let client = owner(of: presenter.rawValue) else { return }
        // A document moved where the presenter's user cannot see keeps, for it, the last name it knew.
        if let known = client.presenter(presenter.rawValue)?.path, path != known, !resolver.maySee(path, for: client.peer) {
            path = known
        }
        let action: ControlProtocol.DocumentAction
        switch event.action {
        case .reload: action = .reload
        case .close: action = .close
        case .conflict(let id): action = .conflict(id)
        case .failed(let message): action = .failed(message: message)
        }
        let change = DocumentChange(
            document: event.document, path: path,
            kind: event.kind == .deletion ? .deletion : .change,
            before: event.before.map(Self.identity), after: event.after.map(Self.identity), action: action)
        client.connection.notify(presenter, .documentChanged(change))
        if event.whileAway { client.connection.notify(presenter, event.kind == .deletion ? .didDelete : .didChange) }
        // Foundation's presentedItemDidGainConflictVersion, right after the change that opened it.
        if case .conflict(let id) = action { client.connection.notify(presenter, .didGainConflict(id)) }
    }

    /// Tells the presenter a conflict belonged to that it was resolved (whoever resolved it).
    func tellResolved(_ conflict: ConflictID, _ resolution: Resolution, presenter: PresenterID?) {
        guard let presenter, let client = owner(of: presenter.rawValue) else { return }
        client.connection.notify(presenter, .didResolveConflict(conflict, resolution: resolution))
    }

    // MARK: Requests

    /// The store, or the error for a mount without one.
    private func requireStore() throws(ProtocolError) -> StoreService {
        guard let store else { throw ProtocolError(.storeUnavailable, "this mount runs without a document store (store=off)") }
        return store
    }

    /// A registration of `uid`'s refused because the user already pins as many versions or bytes
    /// as `max_user_pinned_versions` / `max_user_pinned_mb` allow (docs/document-store.md,
    /// "Per-user budget"), or nil. Folders, files that are not there and root's and the owner's
    /// registrations are never refused here.
    func pinRefusal(of uid: UInt32, at path: MountPath) -> ProtocolError? {
        guard let store else { return nil }
        do {
            try store.documentStore.checkRoomForBase(of: uid, path: path.itemPath.string)
        } catch let error as DocumentStoreError {
            // The caller's own uid and counts, nothing of anyone else's.
            if case .userPinsExceeded = error { return Self.protocolError(error, presenter: nil) }
            return nil  // no document there: the registration goes on as for any path
        } catch {
            return nil  // no document there: the registration goes on as for any path
        }
        return nil
    }

    /// `register` with `unsaved`: the store must know the presenter's document now. Throws (and
    /// the caller unregisters) when it is no document. Returns the conflict it took over (its user's
    /// gone presenter's on the document), to be told once the presenter is registered.
    func registerUnsaved(_ id: PresenterID, path: MountPath) throws(ProtocolError) -> [ConflictID] {
        let store = try requireStore()
        do {
            try store.register(id, path: path.itemPath)
            return try store.setUnsavedChanges(id, true)
        } catch {
            throw Self.protocolError(error, presenter: id)
        }
    }

    /// Tells the presenter of the conflicts it took over, as Foundation's
    /// presentedItemDidGainConflictVersion: after its `registered` or `ok`, so that it knows itself.
    func tellAdopted(_ conflicts: [ConflictID], presenter: PresenterID, _ client: ControlClientState) {
        for conflict in conflicts { client.connection.notify(presenter, .didGainConflict(conflict)) }
    }

    func setUnsavedChanges(_ request: SetUnsavedChanges, _ client: ControlClientState) {
        let connection = client.connection
        do throws(ProtocolError) {
            guard let id = client.presenterID(request.presenter.rawValue) else {
                throw ProtocolError(.unknownPresenter, "\(request.presenter) is not registered on this connection")
            }
            let store = try requireStore()
            guard let path = coordinator.presentedPath(of: id) else {
                throw ProtocolError(.unknownPresenter, "\(request.presenter) is no longer registered")
            }
            let adopted: [ConflictID]
            do {
                // Registration with the store is queued behind the coordinator's; make sure it happened.
                try store.register(id, path: path)
                adopted = try store.setUnsavedChanges(id, request.unsaved)
            } catch {
                throw Self.protocolError(error, presenter: id)
            }
            connection.send(.ok(OK(id: request.id)))
            tellAdopted(adopted, presenter: id, client)
        } catch {
            connection.reply(to: request.id, error: error)
        }
    }

    func conflicts(_ request: ConflictsQuery, _ client: ControlClientState) {
        let connection = client.connection
        do throws(ProtocolError) {
            let store = try requireStore()
            let root = client.peer.credentials.uid == 0
            if let presenter = request.presenter {
                guard root || client.presenterID(presenter.rawValue) != nil else {
                    throw ProtocolError(.unknownPresenter, "\(presenter) is not registered on this connection")
                }
            }
            // Root lists every conflict; another user reads its own only, through the store's owner
            // index: the cost follows its conflicts, not every user's.
            let all: [Conflict]
            do {
                all = root ? try store.conflicts() : try store.documentStore.conflicts(ownedBy: client.peer.credentials.uid)
            } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            var list: [ConflictInfo] = []
            for conflict in all {
                let owner = store.coordinatorID(of: conflict.presenter)
                if let presenter = request.presenter {
                    guard owner?.rawValue == presenter.rawValue else { continue }
                } else if !mayResolve(conflict, client) {
                    continue
                }
                guard var path = try? MountPath(validating: conflict.path) else { continue }
                if !root && !resolver.maySee(path, for: client.peer) {
                    // Its own presenter's document, moved where its user cannot see: the name it knew.
                    guard let known = owner.flatMap({ self.owner(of: $0.rawValue)?.presenter($0.rawValue)?.path }) else { continue }
                    path = known
                }
                list.append(ConflictInfo(
                    conflict: conflict.id,
                    document: conflict.document, path: path,
                    presenter: owner, storePresenter: conflict.presenter.rawValue,
                    kind: DocumentChangeKind(rawValue: conflict.kind.rawValue) ?? .change,
                    createdMs: UInt64(max(0, conflict.createdAt.timeIntervalSince1970 * 1000)),
                    before: conflict.before.map(Self.identity), after: conflict.after.map(Self.identity),
                    baseVersion: conflict.baseVersion, theirsVersion: conflict.theirsVersion))
            }
            connection.send(.conflictList(ConflictList(id: request.id, conflicts: list)))
        } catch {
            connection.reply(to: request.id, error: error)
        }
    }

    func resolve(_ request: Resolve, _ client: ControlClientState) {
        let connection = client.connection
        let uid = client.peer.credentials.uid
        // Everything is checked before anything is written: a refused request changes nothing.
        let conflict: Conflict
        let store: StoreService
        let owner: PresenterID?
        var mineFD: Int32 = -1
        let pending: ControlClientState.Pending
        do throws(ProtocolError) {
            store = try requireStore()
            // Another user's conflict is refused without naming its presenter, process or document,
            // and an id that names no conflict alike: which ids exist is not the peer's to learn.
            let refused = ProtocolError(.permissionDenied, "uid \(client.peer.credentials.uid) may not resolve \(request.conflict): it is no conflict of this user's presenters or saves")
            do {
                conflict = try store.documentStore.conflict(request.conflict)
            } catch DocumentStoreError.unknownConflict(_) where client.peer.credentials.uid != 0 {
                throw refused
            } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            owner = store.coordinatorID(of: conflict.presenter)
            guard mayResolve(conflict, client) else { throw refused }
            guard conflict.state == .open else {
                throw ProtocolError(.alreadyResolved, "\(request.conflict) is already resolved (\(conflict.resolution?.rawValue ?? "?"))")
            }
            if request.resolution.needsContents && request.mine == nil && conflict.kind != .lostUpdate {
                throw ProtocolError(.invalidValue, "resolve: \(request.resolution.rawValue) needs the presenter's contents (\"mine\" or \"minePath\")")
            }
            guard let document = try? MountPath(validating: conflict.path) else {
                throw ProtocolError(.internalError, "\(request.conflict) names a path the protocol cannot carry")
            }
            // The daemon writes for the peer: it must be allowed to write what is written.
            switch request.resolution {
            case .save, .merge:
                _ = try resolver.authorize(document, for: client.peer, write: true, structural: true, followFinal: false)
            case .keepBoth:
                _ = try resolver.authorize(document.parent ?? .root, for: client.peer, write: true)
            case .reload where conflict.kind == .lostUpdate:
                // A lost update's reload writes theirs back over the file the late save left.
                _ = try resolver.authorize(document, for: client.peer, write: true, structural: true, followFinal: false)
            case .close, .reload:
                break
            }
            if case .path(let path)? = request.mine, request.resolution.needsContents {
                let item = try resolver.authorize(path, for: client.peer, write: false)
                // The file stays open while the resolution waits for its grant: one of the others'
                // share of descriptors for a user other than root and the owner.
                guard descriptors.takeShare(uid, units: 1) else {
                    throw ProtocolError(.limitExceeded, "the daemon's descriptors for users other than root and the owner are all taken: "
                        + "try again once some close, or give the contents (\"mine\")")
                }
                do throws(ProtocolError) {
                    mineFD = try openForReading(item.path, peer: client.peer)
                } catch {
                    descriptors.giveShare(uid, units: 1)
                    throw error
                }
            }
            pending = try beginStoreWait(request.id, client)
        } catch {
            if mineFD >= 0 { closeMine(mineFD, uid) }
            connection.reply(to: request.id, error: error)
            return
        }
        var mine: Contents?
        switch request.mine {
        case .bytes(let bytes)?: mine = .bytes(bytes)
        case .path?: mine = mineFD >= 0 ? .file(absolutePath: "/proc/self/fd/\(mineFD)") : nil
        case nil: break
        }
        let actor = owner.map { client.presenterID($0.rawValue) != nil } == true
            ? nil : "control:uid:\(client.peer.credentials.uid):pid:\(client.origin.pid)"
        let resolution = request.resolution
        let requestID = request.id
        let conflictOwner = owner
        // What the daemon creates for the peer belongs to the peer. The resolution's write waits
        // for its grant (the answers to the asks it causes arrive on this connection's queue)
        // holding no thread: a peer's many waiting resolutions never hold up another's.
        let fileOwner = FileOwner(uid: client.peer.credentials.uid, gid: client.peer.credentials.gid)
        store.resolve(conflict.id, with: resolution, mine: mine, by: actor, owner: fileOwner, requestedBy: client.origin,
                      waiting: { client.waiting(pending, id: $0) }) { [mineFD] result in
            defer { if mineFD >= 0 { self.closeMine(mineFD, uid) } }
            let ended = client.ended(pending)
            do {
                let outcome = try result.get()
                defer { self.tellResolved(request.conflict, request.resolution, presenter: conflictOwner) }
                guard ended != .gone else { return }
                connection.send(.resolved(Resolved(
                    id: requestID, conflict: request.conflict, resolution: request.resolution,
                    path: (try? MountPath(validating: outcome.conflict.path)) ?? .root,
                    writtenPath: outcome.writtenPath.flatMap { try? MountPath(validating: $0) },
                    preservedVersion: outcome.preserved.map(\.version.id),
                    mergeConflicts: outcome.mergeConflicts, after: outcome.after.map(Self.identity))))
            } catch {
                Self.replyToStoreWait(ended, requestID, connection, Self.protocolError(error, presenter: owner))
            }
        }
    }

    func versions(_ request: VersionsQuery, _ client: ControlClientState) {
        let connection = client.connection
        do throws(ProtocolError) {
            let store = try requireStore()
            let item = try resolver.authorize(request.path, for: client.peer, write: false)
            let versions: [Version]
            do { versions = try store.documentStore.versions(ofPath: item.path.itemPath.string) } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            let list = versions.compactMap { v -> VersionInfo? in
                guard Self.mayRead(v, client.peer), var path = try? MountPath(validating: v.path) else { return nil }
                // A version kept under an older name the peer may not see shows the name it asked for.
                if path != item.path && !resolver.maySee(path, for: client.peer) { path = item.path }
                return VersionInfo(
                    version: v.id, document: v.document,
                    path: path, createdMs: UInt64(max(0, v.createdAt.timeIntervalSince1970 * 1000)), size: UInt64(max(0, v.size)),
                    reason: v.reason.rawValue, method: v.method.rawValue, pinned: v.isPinned)
            }
            connection.send(.versionList(VersionList(id: request.id, versions: list)))
        } catch {
            connection.reply(to: request.id, error: error)
        }
    }

    func readVersion(_ request: ReadVersion, _ client: ControlClientState) {
        let connection = client.connection
        do throws(ProtocolError) {
            let store = try requireStore()
            let stored: String
            let documentPath: String
            do {
                let version = try store.documentStore.version(request.version)
                // One the peer could not read when it was kept is unknown to it.
                guard Self.mayRead(version, client.peer) else { throw DocumentStoreError.unknownVersion(request.version.rawValue) }
                documentPath = (try store.documentStore.document(version.document)?.path) ?? version.path
                stored = try store.documentStore.storedFile(of: version.id)
            } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            // A version is readable by whoever may read its document now (or its folder, once deleted).
            guard let path = try? MountPath(validating: documentPath) else {
                throw ProtocolError(.internalError, "\(request.version) names a path the protocol cannot carry")
            }
            do {
                _ = try resolver.authorize(path, for: client.peer, write: false)
            } catch {
                // Refused as a version that does not exist: the refusal would name the document
                // (version ids are sequential, so any could be asked for), which the peer may not see.
                throw ProtocolError(.unknownVersion, DocumentStoreError.unknownVersion(request.version.rawValue).description)
            }
            let fd = open(stored, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw ProtocolError(.internalError, "cannot open \(request.version): \(ControlPathResolver.describe(errno))") }
            defer { Glibc.close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw ProtocolError(.internalError, "cannot stat \(request.version): \(ControlPathResolver.describe(errno))") }
            let size = UInt64(max(0, st.st_size))
            let wanted = Int(min(UInt64(request.length ?? ReadVersion.maxLength), size > request.offset ? size - request.offset : 0))
            var data = [UInt8](repeating: 0, count: wanted)
            var done = 0
            while done < wanted {
                let n = retryingEINTR { data.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, wanted - done, off_t(request.offset) + off_t(done)) } }
                guard n >= 0 else { throw ProtocolError(.internalError, "cannot read \(request.version): \(ControlPathResolver.describe(errno))") }
                if n == 0 { break }
                done += n
            }
            data.removeLast(wanted - done)
            connection.send(.versionData(VersionData(
                id: request.id, version: request.version, offset: request.offset, size: size, data: data,
                eof: request.offset + UInt64(done) >= size)))
        } catch {
            connection.reply(to: request.id, error: error)
        }
    }

    /// `restore`: the daemon writes a kept version back for the peer (the only writer of its store).
    /// The peer must be allowed to replace the document (checked on the backing file with its
    /// credentials), and the version must be one of that document's: a version of a document it
    /// may not see, or of another document, is an unknown version to it.
    func restore(_ request: Restore, _ client: ControlClientState) {
        let connection = client.connection
        let store: StoreService
        let version: Version
        let target: MountPath
        let pending: ControlClientState.Pending
        do throws(ProtocolError) {
            store = try requireStore()
            let item = try resolver.authorize(request.path, for: client.peer, write: true, structural: true, followFinal: false)
            target = item.path
            let unknown = ProtocolError(.unknownVersion, "\(target) has no \(request.version) (see its versions)")
            do {
                guard let kept = try? store.documentStore.version(request.version), Self.mayRead(kept, client.peer) else { throw unknown }
                let ofDocument = try store.documentStore.versions(ofPath: target.itemPath.string).contains { $0.id == kept.id }
                guard ofDocument || ExactName.same(kept.path, target.itemPath.string) else { throw unknown }
                version = kept
            } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            pending = try beginStoreWait(request.id, client)
        } catch {
            connection.reply(to: request.id, error: error)
            return
        }
        let requestID = request.id
        // A file the restore re-creates belongs to the peer. Its write waits holding no thread.
        let owner = FileOwner(uid: client.peer.credentials.uid, gid: client.peer.credentials.gid)
        store.restore(version.id, to: target.itemPath, owner: owner, requestedBy: client.origin,
                      waiting: { client.waiting(pending, id: $0) }) { result in
            let ended = client.ended(pending)
            do {
                let outcome = try result.get()
                guard ended != .gone else { return }
                connection.send(.restored(Restored(
                    id: requestID, version: request.version, path: target,
                    preservedVersion: outcome.preserved.map(\.version.id),
                    after: Self.identity(outcome.after))))
            } catch {
                Self.replyToStoreWait(ended, requestID, connection, Self.protocolError(error, presenter: nil))
            }
        }
    }

    /// `removeVersions`: needs the permission to replace the document (as `restore`).
    func removeVersions(_ request: RemoveVersions, _ client: ControlClientState) {
        let connection = client.connection
        do throws(ProtocolError) {
            let store = try requireStore()
            let item = try resolver.authorize(request.path, for: client.peer, write: true, structural: true, followFinal: false)
            do { try store.documentStore.removeOtherVersions(ofPath: item.path.itemPath.string) } catch {
                throw Self.protocolError(error, presenter: nil)
            }
            connection.send(.ok(OK(id: request.id)))
        } catch {
            connection.reply(to: request.id, error: error)
        }
    }

    // MARK: Support

    /// A restore or resolution is an access its peer's user waits for (`max_user_accesses`, and a
    /// connection's 1,024), counted from its arrival until it is done, so one user's cannot pile
    /// up without bound (each holds a request in the coordinator, and memory); beyond either it is
    /// refused at once, nothing done. Root and the mount's owner are not bound per user. Its wait
    /// for the grant ends (cancelled, nothing written) when its connection closes, and a `cancel`
    /// naming it ends it as for a `coordinate`.
    private func beginStoreWait(_ id: ControlProtocol.RequestID, _ client: ControlClientState) throws(ProtocolError) -> ControlClientState.Pending {
        let uid = client.peer.credentials.uid
        if let held = held(by: uid, \.accessCount), held >= limits.maxUserAccesses {
            throw ProtocolError(.limitExceeded, "uid \(uid) already holds or waits for \(held) accesses, restores and resolutions (max_user_accesses): try again once some are done")
        }
        guard let pending = client.beginWaiting(request: id.rawValue) else {
            throw ProtocolError(.limitExceeded, "a connection may hold or wait for at most \(ControlLimits.accessesPerConnection) accesses, restores and resolutions: try again once some are done")
        }
        return pending
    }

    /// The reply to a restore or resolution that failed: none once its connection closed, `cancelled`
    /// when the client cancelled it.
    private static func replyToStoreWait(_ ended: ControlClientState.Failure, _ id: ControlProtocol.RequestID,
                                         _ connection: ControlConnection, _ error: ProtocolError) {
        switch ended {
        case .gone: break
        case .cancelledByClient: connection.reply(to: id, error: ProtocolError(.cancelled, "cancelled by the client"))
        case .failed: connection.reply(to: id, error: error)
        }
    }

    /// Whether the peer of `client` may list and resolve `conflict`: root any; another user the
    /// conflicts it owns (its presenters', registered on any of its connections, also once they
    /// are gone, and its processes' lost updates: the store records the owner's uid with each
    /// conflict). A conflict of an older store has no owner and is root's, except a lost update,
    /// whose saver's uid is in its name.
    func mayResolve(_ conflict: Conflict, _ client: ControlClientState) -> Bool {
        let uid = client.peer.credentials.uid
        if uid == 0 { return true }
        if let owner = conflict.owner { return owner == uid }
        return StoreService.saverUID(conflict.presenter) == uid
    }

    /// Closes the file a resolution resolved from, and gives its descriptor back to the share.
    private func closeMine(_ fd: Int32, _ uid: UInt32) {
        Glibc.close(fd)
        descriptors.giveShare(uid, units: 1)
    }

    /// Opens a file the resolver already checked (its path has no symbolic links left) without
    /// following any link, and checks the peer's permissions again on what was opened, so a file
    /// swapped in meanwhile is never read for a peer that could not read it.
    private func openForReading(_ path: MountPath, peer: ControlPathResolver.Peer) throws(ProtocolError) -> Int32 {
        let names = path.components.map(String.init)
        guard let last = names.last else { throw ProtocolError(.invalidValue, "minePath: the mount's root is no file") }
        var fd = open(resolver.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw ProtocolError(.internalError, "cannot open the backing folder: \(ControlPathResolver.describe(errno))") }
        for name in names.dropLast() {
            let next = name.withNameCString { openat(fd, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            Glibc.close(fd)
            guard next >= 0 else { throw ProtocolError(.notFound, "minePath \(path): \(ControlPathResolver.describe(errno))") }
            var st = stat()
            guard fstat(next, &st) == 0, peer.may(ControlPathResolver.Attributes(st, acl: AccessACL.read(fd: next)), .search) else {
                Glibc.close(next)
                throw ProtocolError(.permissionDenied, "uid \(peer.credentials.uid) may not read \(path)")
            }
            fd = next
        }
        let file = last.withNameCString { openat(fd, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        let code = errno
        Glibc.close(fd)
        guard file >= 0 else {
            throw ProtocolError(code == ELOOP ? .notFound : .notFound, "minePath \(path): \(ControlPathResolver.describe(code))")
        }
        // Kept open while the resolution waits: never at a number the daemon keeps for its own files.
        guard DescriptorReserve.admits(file) else {
            Glibc.close(file)
            throw ProtocolError(.limitExceeded, "minePath \(path): \(DescriptorReserve.refusal(for: "the file it resolves from"))")
        }
        var st = stat()
        guard fstat(file, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            Glibc.close(file)
            throw ProtocolError(.invalidValue, "minePath \(path) is not a regular file")
        }
        guard peer.may(ControlPathResolver.Attributes(st, acl: AccessACL.read(fd: file)), .read) else {
            Glibc.close(file)
            throw ProtocolError(.permissionDenied, "uid \(peer.credentials.uid) may not read \(path)")
        }
        return file
    }

    /// Whether `peer` could read the file `version` keeps when it was kept (its mode, owner and
    /// ACL then): a document made readable since (a `chmod`, a readable file renamed over it) does
    /// not open its earlier versions to everyone. Versions of older stores recorded nothing: who
    /// may read the document now decides alone, as before.
    static func mayRead(_ version: Version, _ peer: ControlPathResolver.Peer) -> Bool {
        guard peer.credentials.uid != 0, let access = version.sourceAccess else { return true }
        var st = stat()
        st.st_mode = access.mode
        st.st_uid = access.uid
        st.st_gid = access.gid
        return peer.may(ControlPathResolver.Attributes(st, acl: access.acl.flatMap(AccessACL.init(xattr:))), .read)
    }

    static func identity(_ identity: FileIdentity) -> DocumentIdentity {
        DocumentIdentity(device: identity.device, inode: identity.inode, size: UInt64(max(0, identity.size)),
                         modificationTimeNanoseconds: identity.modificationTimeNanoseconds)
    }

    /// The protocol's error for what the store (or the coordinated write of a resolution) threw.
    static func protocolError(_ error: any Error, presenter: PresenterID?) -> ProtocolError {
        if let error = error as? ProtocolError { return error }
        if let error = error as? CoordinationError { return protocolError(error) }
        guard let error = error as? DocumentStoreError else {
            return ProtocolError(.internalError, "document store: \(error)")
        }
        let message = error.description
        switch error {
        case .invalidPath: return ProtocolError(.invalidPath, message)
        case .notARegularFile, .unknownDocument:
            return ProtocolError(.notADocument, message)
        case .fileNotFound:
            return ProtocolError(.notADocument, "\(message): only an existing regular file is a document")
        case .unknownPresenter:
            let who = presenter.map { "\($0)" } ?? "the presenter"
            return ProtocolError(.notADocument, "\(who) has no document in the store (a folder, a file that is gone or was closed)")
        case .unknownVersion: return ProtocolError(.unknownVersion, message)
        case .unknownConflict: return ProtocolError(.unknownConflict, message)
        case .conflictAlreadyResolved: return ProtocolError(.alreadyResolved, message)
        case .resolutionNotApplicableToDeletion: return ProtocolError(.notApplicable, message)
        case .missingContents: return ProtocolError(.invalidValue, message)
        case .baseUnavailable: return ProtocolError(.baseUnavailable, message)
        case .binaryContents: return ProtocolError(.binaryContents, message)
        case .userPinsExceeded: return ProtocolError(.limitExceeded, message)
        case .system, .database: return ProtocolError(.internalError, message)
        }
    }
}
