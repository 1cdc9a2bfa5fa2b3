import Coordination
import Testing
import CoordinationTestSupport

@Suite struct DeadlineTests {
    @Test func silentPresenterTimesOutAndAccessProceeds() async throws {
        let recorder = EventRecorder()
        let policy = CoordinationPolicy(askDeadline: .milliseconds(100), onAskTimeout: .proceed)
        let coordinator = Coordinator(configuration: CoordinatorConfiguration(defaultPolicy: policy), eventSink: recorder)
        let journal = Journal()
        let silent = RecordingPresenter("S", at: path("f"), journal: journal, behavior: .hangRelinquish)
        let sid = try coordinator.addFilePresenter(silent)
        let clock = ContinuousClock()
        let start = clock.now
        let (_, box) = request(coordinator, [.writingIntent(with: path("f"), options: .forMerging)])
        #expect(await eventually { box.result != nil })
        let elapsed = clock.now - start
        let access = try #require(box.access)
        #expect(elapsed >= .milliseconds(90) && elapsed < .seconds(2))
        #expect(access.timedOutPresenters == [sid])
        // The rest of its chain (save) is skipped: one deadline per presenter.
        #expect(!journal.all.contains("S:save"))
        access.release()
        let kinds = recorder.all.map(\.kind)
        #expect(kinds.contains { if case .presenterTimedOut(sid, .relinquishToWriter, _) = $0 { return true }; return false })
    }

    @Test func strictPolicyFailsWithClearError() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let sid = try coordinator.addFilePresenter(RecordingPresenter("S", at: path("f"), journal: journal, behavior: .hangRelinquish))
        let strict = CoordinationPolicy(askDeadline: .milliseconds(50), onAskTimeout: .strict)
        let (id, box) = request(coordinator, [.writingIntent(with: path("f"))], policy: strict)
        #expect(await eventually { box.result != nil })
        guard case .presenterTimedOut(id, sid, .relinquishToWriter, _)? = box.error else {
            Issue.record("expected presenterTimedOut, got \(String(describing: box.result))")
            return
        }
        #expect(box.error?.posixErrorCode == 110 /* ETIMEDOUT */)
        // Nothing is left held.
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("g")), origin: testOrigin) != nil)
        #expect(coordinator.status().held.allSatisfy { $0.intents.first?.path != path("f") })
    }

    @Test func waitDeadlineBoundsArbitration() async throws {
        let coordinator = Coordinator()
        let holder = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let policy = CoordinationPolicy(waitDeadline: .milliseconds(50))
        let (id, box) = request(coordinator, [.readingIntent(with: path("f"))], policy: policy)
        #expect(await eventually { box.result != nil })
        guard case .waitTimedOut(id, let p, let blocker, _)? = box.error else {
            Issue.record("expected waitTimedOut, got \(String(describing: box.result))")
            return
        }
        #expect(p == path("f"))
        #expect(blocker == holder.id)
        #expect(coordinator.status().waiting.isEmpty)
        holder.release()
    }

    @Test func goAheadAtTheDeadlineIsGrantedBesideTheHolderAndAsksPresenters() async throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("P", at: path("f"), journal: journal))
        let writer = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f"), options: .contentIndependentMetadataOnly), origin: testOrigin))
        let policy = CoordinationPolicy(waitDeadline: .milliseconds(50), atWaitDeadline: .goAhead)
        let (id, box) = request(coordinator, [.readingIntent(with: path("f"))], policy: policy)
        #expect(await eventually { box.result != nil })
        let access = try #require(box.access)
        #expect(access.id == id)
        // It still asked the presenter, and it holds: a later write waits for it too.
        #expect(journal.view("P").first == "relinquishToReader")
        #expect(coordinator.status().held.contains { $0.id == id })
        #expect(recorder.all.contains { if case .wentAheadWithoutExclusion(writer.id, _) = $0.kind { return $0.requestID == id }; return false })
        access.release(); writer.release()
    }

    @Test func goAheadPastYieldingHoldsFailsWithEBUSYOnlyForAWriteThatDoesNotYield() async throws {
        let coordinator = Coordinator()
        let policy = CoordinationPolicy(waitDeadline: .milliseconds(50), atWaitDeadline: .goAheadPastYieldingHolds)
        // An explicit coordinated write: EBUSY at the deadline.
        let explicit = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let (id, box) = request(coordinator, [.writingIntent(with: path("f"))], policy: policy)
        #expect(await eventually { box.result != nil })
        guard case .busy(id, let p, let holder, _)? = box.error else {
            Issue.record("expected busy, got \(String(describing: box.result))")
            return
        }
        #expect(p == path("f") && holder == explicit.id)
        #expect(box.error?.posixErrorCode == 16 /* EBUSY */)
        explicit.release()
        // A write that yields (an open file): the waiter goes ahead beside it at the deadline, not before.
        let open = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        open.yieldAtWaitDeadlines()
        let clock = ContinuousClock()
        let start = clock.now
        let (_, second) = request(coordinator, [.writingIntent(with: path("f"))], policy: policy)
        #expect(await eventually { second.result != nil })
        #expect(clock.now - start >= .milliseconds(45))
        let access = try #require(second.access)
        access.release(); open.release()
    }

    /// An append (``CoordinationPolicy/passesYieldingReaders``) does not wait for held reads that
    /// yield (an open file's), only for explicit reads and for writes, whether they yield or not.
    @Test func anAppendPassesYieldingReadsButNotExplicitReadsOrWrites() async throws {
        let coordinator = Coordinator()
        let append = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAheadPastYieldingHolds, passesYieldingReaders: true)
        let open = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("f")), origin: testOrigin))
        open.yieldAtWaitDeadlines()
        let (_, passed) = request(coordinator, [.writingIntent(with: path("f"))], policy: append)
        #expect(await eventually { passed.result != nil }, "granted long before its 60 s deadline")
        try #require(passed.access).release()
        // Without the option the same write waits for that read.
        let (_, waiting) = request(coordinator, [.writingIntent(with: path("f"))],
                                   policy: CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAheadPastYieldingHolds))
        try await Task.sleep(for: .milliseconds(200))
        #expect(waiting.result == nil)
        open.release()
        #expect(await eventually { waiting.result != nil })
        try #require(waiting.access).release()
        // An explicit read and a yielding write (another program's open for writing) hold it up.
        for holdsWrite in [false, true] {
            let intent: FileAccessIntent = holdsWrite ? .writingIntent(with: path("f")) : .readingIntent(with: path("f"))
            let holder = try #require(coordinator.tryCoordinateImmediately(intent, origin: testOrigin))
            if holdsWrite { holder.yieldAtWaitDeadlines() }
            let (_, held) = request(coordinator, [.writingIntent(with: path("f"))], policy: append)
            try await Task.sleep(for: .milliseconds(200))
            #expect(held.result == nil, "held up by \(intent)")
            holder.release()
            #expect(await eventually { held.result != nil })
            try #require(held.access).release()
        }
    }

    /// A read that passes appenders (another program's read through the mount) does not wait for
    /// a yielding write that only appends (a log being written), but waits for a yielding write
    /// that does not, and for an explicit write; a read without the option waits for the appender.
    @Test func aReadPassesYieldingAppendsButNotOtherWrites() async throws {
        let coordinator = Coordinator()
        let read = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAhead, passesYieldingAppenders: true)
        let appender = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        appender.yieldAtWaitDeadlines(appending: true)
        let (_, passed) = request(coordinator, [.readingIntent(with: path("f"))], policy: read)
        #expect(await eventually { passed.result != nil }, "granted long before its 60 s deadline")
        try #require(passed.access).release()
        let (_, waiting) = request(coordinator, [.readingIntent(with: path("f"))], policy: CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAhead))
        try await Task.sleep(for: .milliseconds(200))
        #expect(waiting.result == nil, "a read without the option went ahead past the appender")
        appender.release()
        #expect(await eventually { waiting.result != nil })
        try #require(waiting.access).release()
        // A yielding write that is not an append, and an explicit write, hold it up.
        for yields in [true, false] {
            let writer = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
            if yields { writer.yieldAtWaitDeadlines() }
            let (_, held) = request(coordinator, [.readingIntent(with: path("f"))], policy: read)
            try await Task.sleep(for: .milliseconds(200))
            #expect(held.result == nil, "held up by a write (yielding: \(yields))")
            writer.release()
            #expect(await eventually { held.result != nil })
            try #require(held.access).release()
        }
    }

    /// `yieldingHolds(blocking:)` names the open files in a waiting write's way, and
    /// `goAheadPastYieldingHolds` takes its deadline's action early: it goes ahead past open files
    /// (and readers), never past an explicit coordinated write.
    @Test func aWriteGoesAheadPastOpenFilesWhenToldToAndNeverPastAnExplicitWrite() async throws {
        let coordinator = Coordinator()
        let policy = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAheadPastYieldingHolds)
        let reader = AccessOrigin(pid: 5151, uid: 0, gid: 0, executable: "reader")
        let open = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("f")), origin: reader))
        open.yieldAtWaitDeadlines()
        let explicit = try #require(coordinator.tryCoordinateImmediately(.readingIntent(with: path("f")), origin: testOrigin))
        let (id, waiting) = request(coordinator, [.writingIntent(with: path("f"))], purpose: "w", policy: policy)
        try await Task.sleep(for: .milliseconds(50))
        #expect(waiting.result == nil)
        #expect(coordinator.yieldingHolds(blocking: id)?.map(\.origin.pid) == [5151], "the open file, not the explicit read")
        #expect(coordinator.goAheadPastYieldingHolds(id), "past an open file and a read, as at its deadline")
        #expect(await eventually { waiting.result != nil })
        #expect(coordinator.yieldingHolds(blocking: id) == nil, "it waits no more")
        #expect(!coordinator.goAheadPastYieldingHolds(id))
        try #require(waiting.access).release()
        explicit.release()
        open.release()
        // An explicit write in its way: it waits on (at its deadline it would fail with EBUSY).
        let writer = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let (held, blocked) = request(coordinator, [.writingIntent(with: path("f"))], purpose: "w2", policy: policy)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!coordinator.goAheadPastYieldingHolds(held))
        try await Task.sleep(for: .milliseconds(100))
        #expect(blocked.result == nil)
        writer.release()
        #expect(await eventually { blocked.result != nil })
        try #require(blocked.access).release()
    }

    /// A write of an unmodified program (its policy goes ahead past yielding holds) that is granted
    /// but not yet an open file (its open still being made, its presenters asked) is no explicit
    /// write: another such write whose deadline passes meanwhile goes ahead past it, never EBUSY;
    /// sent ahead early (`goAheadPastYieldingHolds`) it waits on for it.
    @Test func aWriteInProgressOfAnUnmodifiedProgramFailsNobodyAtTheirDeadline() async throws {
        let coordinator = Coordinator()
        let long = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAheadPastYieldingHolds)
        let (_, first) = request(coordinator, [.writingIntent(with: path("f"))], purpose: "first", policy: long)
        #expect(await eventually { first.access != nil })
        let (early, sentEarly) = request(coordinator, [.writingIntent(with: path("f"))], purpose: "early", policy: long)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!coordinator.goAheadPastYieldingHolds(early), "not before its deadline")
        #expect(sentEarly.result == nil)
        coordinator.cancel(early)
        let short = CoordinationPolicy(waitDeadline: .milliseconds(100), atWaitDeadline: .goAheadPastYieldingHolds)
        let (_, second) = request(coordinator, [.writingIntent(with: path("f"))], purpose: "second", policy: short)
        #expect(await eventually { second.result != nil })
        #expect(second.error == nil, "went ahead, not \(String(describing: second.error))")
        try #require(second.access).release()
        try #require(first.access).release()
    }

    /// A read, whose deadline goes ahead past anything, goes ahead early only past open files
    /// (yielding holds): an explicit write keeps it waiting until that deadline; one whose deadline
    /// fails it is never sent ahead early.
    @Test func aReadGoesAheadEarlyPastAnOpenFileButNotPastAnExplicitWrite() async throws {
        let coordinator = Coordinator()
        let readPolicy = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .goAhead)
        let writerOrigin = AccessOrigin(pid: 5252, uid: 0, gid: 0, executable: "writer")
        let open = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: writerOrigin))
        open.yieldAtWaitDeadlines()
        let (id, waiting) = request(coordinator, [.readingIntent(with: path("f"))], purpose: "r", policy: readPolicy)
        try await Task.sleep(for: .milliseconds(50))
        #expect(waiting.result == nil)
        #expect(coordinator.yieldingHolds(blocking: id)?.map(\.origin.pid) == [5252])
        #expect(coordinator.goAheadPastYieldingHolds(id))
        #expect(await eventually { waiting.access != nil })
        try #require(waiting.access).release()
        open.release()
        let explicit = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let (held, blocked) = request(coordinator, [.readingIntent(with: path("f"))], purpose: "r2", policy: readPolicy)
        try await Task.sleep(for: .milliseconds(50))
        #expect(coordinator.yieldingHolds(blocking: held)?.isEmpty == true, "an explicit write is no open file")
        #expect(!coordinator.goAheadPastYieldingHolds(held))
        let failing = CoordinationPolicy(waitDeadline: .seconds(60), atWaitDeadline: .fail)
        let (strict, failed) = request(coordinator, [.readingIntent(with: path("f"))], purpose: "r3", policy: failing)
        try await Task.sleep(for: .milliseconds(50))
        #expect(!coordinator.goAheadPastYieldingHolds(strict))
        #expect(blocked.result == nil && failed.result == nil)
        explicit.release()
        #expect(await eventually { blocked.access != nil && failed.access != nil })
        try #require(blocked.access).release()
        try #require(failed.access).release()
    }

    @Test func slowPresenterWithinDeadlineIsWaitedFor() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("S", at: path("f"), journal: journal, behavior: .slowRelinquish(.milliseconds(60))))
        let clock = ContinuousClock()
        let start = clock.now
        let fc = FileCoordinator(coordinator: coordinator)
        try await fc.coordinate(readingItemAt: path("f")) { _ in journal.log("ACCESS") }
        #expect(clock.now - start >= .milliseconds(55))
        await eventually { journal.view("S").count == 4 }
        #expect(journal.view("S") == ["relinquishToReader", "save", "ACCESS", "reacquire"])
    }
}

@Suite struct CancellationTests {
    @Test func cancellingAWaitingRequestEndsItAtOnce() async throws {
        let coordinator = Coordinator()
        let holder = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let (id, box) = request(coordinator, [.writingIntent(with: path("f"))])
        #expect(box.result == nil)
        coordinator.cancel(id)
        guard case .cancelled(id)? = box.error else {
            Issue.record("expected cancelled, got \(String(describing: box.result))")
            return
        }
        #expect(coordinator.status().waiting.isEmpty)
        holder.release()
        coordinator.cancel(id) // finished: no effect
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin) != nil)
    }

    @Test func cancellingDuringPresenterAsksRunsNoAccessorAndStillReacquires() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        // The presenter takes 2 s to relinquish: the cancelled wait ends before it answers (its
        // reacquirer, logged only once it answered, has not run yet), however loaded the machine.
        try coordinator.addFilePresenter(RecordingPresenter("S", at: path("f"), journal: journal, behavior: .slowRelinquish(.seconds(2))))
        let fc = FileCoordinator(coordinator: coordinator)
        let ran = ResultCounter()
        let task = Task {
            try await fc.coordinate(writingItemAt: path("f")) { _ in ran.increment() }
        }
        await eventually { journal.all.contains("S:relinquishToWriter") }
        task.cancel()
        let result = await task.result
        #expect(!journal.all.contains("S:reacquire"), "the wait ends at once, not when the presenter answers")
        guard case .failure(let error) = result, case .cancelled? = error as? CoordinationError else {
            Issue.record("expected cancellation, got \(result)")
            return
        }
        #expect(ran.value == 0)
        // The presenter relinquished late: its reacquirer still runs.
        #expect(await eventually(timeout: .seconds(20)) { journal.all.contains("S:reacquire") })
        #expect(coordinator.status().held.isEmpty)
    }

    @Test func fileCoordinatorCancelEndsPendingWaits() async throws {
        let coordinator = Coordinator()
        let holder = try #require(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f")), origin: testOrigin))
        let fc = FileCoordinator(coordinator: coordinator)
        let ran = ResultCounter()
        let task = Task { try await fc.coordinate(readingItemAt: path("f")) { _ in ran.increment() } }
        await eventually { coordinator.status().waiting.count == 1 }
        fc.cancel()
        let result = await task.result
        guard case .failure(let error) = result, case .cancelled? = error as? CoordinationError else {
            Issue.record("expected cancellation, got \(result)")
            return
        }
        #expect(ran.value == 0)
        holder.release()
    }

    @Test func alreadyCancelledTaskRunsNoAccessor() async throws {
        let coordinator = Coordinator()
        let ran = ResultCounter()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await FileCoordinator(coordinator: coordinator).coordinate(writingItemAt: path("f")) { _ in ran.increment() }
        }
        let result = await task.result
        guard case .failure = result else {
            Issue.record("expected failure")
            return
        }
        #expect(ran.value == 0)
        #expect(coordinator.status().held.isEmpty)
    }
}

@Suite struct PresenterErrorTests {
    @Test func saveErrorFailsTheReadWithThatError() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        try coordinator.addFilePresenter(RecordingPresenter("P", at: path("f"), journal: journal, behavior: .failSave))
        let fc = FileCoordinator(coordinator: coordinator)
        await #expect(throws: PresenterFailure(reason: "disk full")) {
            try await fc.coordinate(readingItemAt: path("f")) { _ in journal.log("ACCESS") }
        }
        #expect(!journal.all.contains("ACCESS"))
        #expect(await eventually { journal.all.contains("P:reacquire") })
        // The hold is gone.
        #expect(coordinator.tryCoordinateImmediately(.writingIntent(with: path("f"), options: .contentIndependentMetadataOnly), origin: testOrigin) != nil)
    }

    @Test func deletionRefusalFailsCoreRequest() async throws {
        let coordinator = Coordinator()
        let journal = Journal()
        let did = try coordinator.addFilePresenter(RecordingPresenter("D", at: path("d"), journal: journal, behavior: .failDeletion))
        let (id, box) = request(coordinator, [.writingIntent(with: path("d/f"), options: .forDeleting)])
        #expect(await eventually { box.result != nil })
        guard case .presenterFailed(id, did, .accommodateSubitemDeletion(let p), let underlying)? = box.error else {
            Issue.record("expected presenterFailed, got \(String(describing: box.result))")
            return
        }
        #expect(p == path("d/f"))
        #expect(underlying as? PresenterFailure == PresenterFailure(reason: "busy"))
        #expect(box.error?.posixErrorCode == 16 /* EBUSY */)
    }

    @Test func removingAPresenterEndsItsPendingAskAsGone() async throws {
        let recorder = EventRecorder()
        let coordinator = Coordinator(eventSink: recorder)
        let journal = Journal()
        let silent = RecordingPresenter("S", at: path("f"), journal: journal, behavior: .hangRelinquish)
        let sid = try coordinator.addFilePresenter(silent)
        let (_, box) = request(coordinator, [.writingIntent(with: path("f"))])
        await eventually { coordinator.status().presenters.first?.pendingAsks.count == 1 }
        #expect(box.result == nil)
        coordinator.removeFilePresenter(silent)
        let access = try #require(box.access, "granted at once when the presenter goes")
        #expect(recorder.all.contains { if case .presenterGone(sid, _) = $0.kind { return true }; return false })
        access.release()
        try? await Task.sleep(for: .milliseconds(20))
        #expect(!journal.all.contains("S:didChange"))
    }

    @Test func presenterSavingThroughCoordinationDoesNotDeadlock() async throws {
        // The presenter's save is itself a coordinated write on its own behalf, to the item that
        // the reader is holding. It must go ahead, long before any deadline.
        let coordinator = Coordinator()
        let journal = Journal()
        let holder = PresenterHolder()
        let presenter = RecordingPresenter("P", at: path("doc"), journal: journal, onSave: {
            let fc = FileCoordinator(filePresenter: holder.presenter, coordinator: coordinator)
            try await fc.coordinate(writingItemAt: path("doc")) { _ in journal.log("P:wrote") }
        })
        holder.presenter = presenter
        try coordinator.addFilePresenter(presenter)
        let clock = ContinuousClock()
        let start = clock.now
        try await FileCoordinator(coordinator: coordinator).coordinate(readingItemAt: path("doc")) { _ in journal.log("ACCESS") }
        #expect(clock.now - start < .seconds(2))
        await eventually { journal.all.contains("P:reacquire") }
        #expect(journal.view("P") == ["relinquishToReader", "save", "wrote", "ACCESS", "reacquire"])
    }
}

final class PresenterHolder: @unchecked Sendable {
    var presenter: RecordingPresenter?
}
