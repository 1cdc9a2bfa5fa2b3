import Coordination
import Testing
import CoordinationTestSupport

@Suite struct MoveTests {
    @Test func movingAPresentedDirectoryMovesEveryPresenterInside() async throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let journal = Journal()
        let presenters = [("D", "d"), ("F", "d/f"), ("G", "d/sub/g"), ("R", ""), ("E", "e"), ("X", "dx")]
        var ids: [String: PresenterID] = [:]
        var objects: [String: RecordingPresenter] = [:]
        for (name, p) in presenters {
            let presenter = RecordingPresenter(name, at: path(p), journal: journal)
            ids[name] = try coordinator.addFilePresenter(presenter)
            objects[name] = presenter
        }
        let fc = FileCoordinator(coordinator: coordinator)
        try await fc.coordinate(writingItemAt: path("d"), options: .forMoving,
                                writingItemAt: path("e/d2"), options: .forReplacing) { from, to in
            fc.item(at: from, willMoveTo: to)
            journal.log("ACCESS")
            fc.item(at: from, didMoveTo: to)
            // The registry follows at once, inside the access.
            #expect(coordinator.presentedPath(of: ids["F"]!) == path("e/d2/f"))
        }
        #expect(coordinator.presentedPath(of: ids["D"]!) == path("e/d2"))
        #expect(coordinator.presentedPath(of: ids["G"]!) == path("e/d2/sub/g"))
        #expect(coordinator.presentedPath(of: ids["X"]!) == path("dx"))
        await eventually { journal.view("G").count == 4 && journal.view("E").count == 3 && journal.view("R").count == 3 }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(journal.view("D") == ["relinquishToWriter", "ACCESS", "didMove(e/d2)", "reacquire"])
        #expect(journal.view("F") == ["relinquishToWriter", "ACCESS", "didMove(e/d2/f)", "reacquire"])
        #expect(journal.view("G") == ["relinquishToWriter", "ACCESS", "didMove(e/d2/sub/g)", "reacquire"])
        // The presenters' own idea of their path follows too (they update it in presentedItemDidMove).
        #expect(objects["G"]?.presentedItemPath == path("e/d2/sub/g"))
        // Old and new parents hear of the subitem move; the destination's parent also had to
        // accommodate the replacement of e/d2.
        #expect(journal.view("R") == ["accommodateSubitemDeletion(e/d2)", "ACCESS", "subitemDidMove(d->e/d2)"])
        #expect(journal.view("E") == ["accommodateSubitemDeletion(e/d2)", "ACCESS", "subitemDidMove(d->e/d2)"])
        #expect(journal.view("X") == ["ACCESS"])
        let kinds = recorder.all.map(\.kind)
        #expect(kinds.contains { if case .willMove(path("d"), path("e/d2")) = $0 { return true }; return false })
        #expect(kinds.contains { if case .announced(.moved(path("d"), path("e/d2"))) = $0 { return true }; return false })
        // Later accesses find the presenters at their new place.
        journal.log("SECOND")
        try await fc.coordinate(writingItemAt: path("e/d2/f")) { _ in }
        await eventually { journal.all.filter { $0.hasPrefix("F:") }.count == 6 }
        #expect(journal.view("F").suffix(3) == ["relinquishToWriter", "didChange", "reacquire"])
    }

    @Test func movingOverAPresentedFileTellsItTheDocumentChanged() async throws {
        // Editors save with a temp file renamed over the document: the document's presenter sees
        // a replacement and then a change, and stays registered at the same path.
        let coordinator = Coordinator()
        let journal = Journal()
        let doc = try coordinator.addFilePresenter(RecordingPresenter("P", at: path("doc.txt"), journal: journal))
        let access = try await withCheckedThrowingContinuation { (c: CheckedContinuation<CoordinatedAccess, any Error>) in
            coordinator.coordinate([.writingIntent(with: path(".doc.tmp"), options: .forMoving),
                                    .writingIntent(with: path("doc.txt"), options: .forReplacing)], origin: testOrigin) {
                c.resume(with: $0.mapError { $0 as any Error })
            }
        }
        access.didMove(from: path(".doc.tmp"), to: path("doc.txt"))
        access.release()
        await eventually { journal.view("P").count == 4 }
        #expect(journal.view("P") == ["relinquishToWriter", "accommodateDeletion", "didChange", "reacquire"])
        #expect(coordinator.presentedPath(of: doc) == path("doc.txt"))
    }

    @Test func aChangeToldBeforeAMoveInOneAccessReachesOnlyThePresentersThatWereThere() async throws {
        // `mv a b` with both presented, seen as a save of `b`: `b` changed (its presenter hears
        // it), then `a`'s presenter follows its file there. The move re-keys it when recorded, so
        // the change, delivered at release, must not reach it: its file did not change.
        let coordinator = Coordinator()
        let journal = Journal()
        let moved = try coordinator.addFilePresenter(RecordingPresenter("A", at: path("a"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("B", at: path("b"), journal: journal))
        let access = try await withCheckedThrowingContinuation { (c: CheckedContinuation<CoordinatedAccess, any Error>) in
            coordinator.coordinate([.writingIntent(with: path("a"), options: .forMoving), .writingIntent(with: path("b"))],
                                   origin: testOrigin) { c.resume(with: $0.mapError { $0 as any Error }) }
        }
        access.didChange(path("b"))
        access.didMove(from: path("a"), to: path("b"))
        access.release()
        await eventually { journal.view("A").count == 3 && journal.view("B").count == 3 }
        try await Task.sleep(for: .milliseconds(100))
        #expect(journal.view("A") == ["relinquishToWriter", "didMove(b)", "reacquire"], "\(journal.all)")
        #expect(journal.view("B") == ["relinquishToWriter", "didChange", "reacquire"], "\(journal.all)")
        #expect(coordinator.presentedPath(of: moved) == path("b"))
        // A change after the move, in its own access, reaches both.
        coordinator.announce(.changed(path("b")), origin: testOrigin)
        await eventually { journal.view("A").count == 4 && journal.view("B").count == 4 }
        #expect(journal.view("A").last == "didChange" && journal.view("B").last == "didChange", "\(journal.all)")
    }

    @Test func announcementOutsideAnAccessIsDeliveredAtOnce() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let id = try coordinator.addFilePresenter(RecordingPresenter("P", at: path("a/b"), journal: journal))
        try coordinator.addFilePresenter(RecordingPresenter("A", at: path("a"), journal: journal))
        coordinator.announce(.moved(from: path("a/b"), to: path("a/c")), origin: testOrigin)
        #expect(coordinator.presentedPath(of: id) == path("a/c"))
        await eventually { journal.all.count == 2 }
        #expect(journal.view("P") == ["didMove(a/c)"])
        #expect(journal.view("A") == ["subitemDidMove(a/b->a/c)"])
    }
}

@Suite struct EventTests {
    @Test func everyStepIsAnEvent() async throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let journal = Journal()
        let pid = try coordinator.addFilePresenter(RecordingPresenter("P", at: path("f"), journal: journal))
        let origin = AccessOrigin(pid: 99, uid: 1, gid: 2, executable: "sed")
        let fc = FileCoordinator(coordinator: coordinator, origin: origin)
        try await fc.coordinate(writingItemAt: path("f"), options: .forMerging) { _ in }
        await eventually { journal.all.count == 4 }
        let events = recorder.all.filter { $0.requestID != nil }
        let names = events.map { event -> String in
            switch event.kind {
            case .requested: return "requested"
            case .presenterAsked(_, let ask, _): return "asked \(ask)"
            case .presenterAnswered(_, let ask, _): return "answered \(ask)"
            case .granted: return "granted"
            case .announced(let c): return "did \(c)"
            case .notified(_, let n): return "notified \(n)"
            case .reacquireScheduled: return "reacquire"
            case .released: return "released"
            default: return "other \(event)"
            }
        }
        #expect(names == ["requested", "asked relinquish to writer", "answered relinquish to writer",
                          "asked save changes", "answered save changes", "granted", "did changed f",
                          "notified item did change f", "reacquire", "released"])
        #expect(Set(events.compactMap(\.requestID)).count == 1)
        #expect(events.allSatisfy { $0.origin?.executable == "sed" && $0.origin?.pid == 99 })
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.time <= $1.time })
        let asked = events.compactMap { event -> PresenterID? in
            if case .presenterAsked(let p, _, let at) = event.kind, at == path("f") { return p }
            return nil
        }
        #expect(asked == [pid, pid])
        #expect(recorder.all.contains { if case .presenterRegistered(pid, _, _) = $0.kind { return true }; return false })
    }

    @Test func waitsAndFailuresAreEvents() throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let holder = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let (id, _) = request(coordinator, [.readingIntent(with: path("f"))])
        coordinator.cancel(id)
        holder.release()
        let mine = recorder.all.filter { $0.requestID == id }.map(\.kind)
        #expect(mine.count == 3)
        guard mine.count == 3, case .requested = mine[0], case .waiting(holder.id) = mine[1],
              case .failed(.cancelled(id)) = mine[2] else {
            Issue.record("unexpected events \(mine)")
            return
        }
    }
}
