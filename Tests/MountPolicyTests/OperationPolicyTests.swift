import Coordination
import MountPolicy
import XCTest

/// The rows of docs/semantics.md's operations and waits tables, as decisions of `OperationPolicy` (no mount,
/// no coordinator: facts in, a plan out). The mount suites (SemanticsTests, SaveRecognitionTests,
/// Store/*) check the same rows end to end.
final class OperationPolicyTests: XCTestCase {
    let policy = OperationPolicy(recognisesSaves: true)
    let withoutSaves = OperationPolicy(recognisesSaves: false)
    let doc = path("dir/doc.txt"), dir = path("dir"), other = path("dir/other.txt")

    // MARK: waits and deadlines

    func testAReadWaitsForAWriterUpToReadWaitThenProceeds() {
        let read = policy.waits(write: false, .init(readWait: 1))
        XCTAssertEqual(read.waitDeadline, .seconds(1))
        XCTAssertEqual(read.atWaitDeadline, .goAhead, "proceeds without exclusion")
    }

    func testAWriteWaitsUpToWriteWaitThenGoesPastReadersAndOpenFilesButNotACoordinatedWrite() {
        let write = policy.waits(write: true, .init(readWait: 1, writeWait: 5))
        XCTAssertEqual(write.waitDeadline, .seconds(5))
        XCTAssertEqual(write.atWaitDeadline, .goAheadPastYieldingHolds, "EBUSY while an explicit coordinated write holds")
    }

    func testAnAppendDoesNotWaitForOpenFilesForReadingButOtherWritesDo() throws {
        XCTAssertTrue(policy.waits(write: true, pastOpenReaders: true, .init()).passesYieldingReaders, "an append passes files open for reading")
        XCTAssertFalse(policy.waits(write: true, .init()).passesYieldingReaders, "any other write waits for them")
        XCTAssertFalse(policy.waits(write: false, pastOpenReaders: true, .init()).passesYieldingReaders)
        let append = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: true, truncate: false, append: true)))
        XCTAssertTrue(append.appends, "O_APPEND without O_TRUNC")
        XCTAssertEqual(append.intents, [.writingIntent(with: doc)], "still a write: presenters asked and told as for any write")
        XCTAssertEqual(append.before, [.beforeInPlaceWrite(doc)])
        XCTAssertFalse(append.truncated)
        let truncating = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: true, truncate: true, append: true)))
        XCTAssertFalse(truncating.appends, "O_APPEND with O_TRUNC replaces what readers read")
        XCTAssertFalse(try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: true, truncate: false))).appends)
        XCTAssertFalse(try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: false, truncate: false, append: true))).appends)
        XCTAssertTrue(policy.setAttributesUnderOpenWaitsForReaders(sizeChanges: true, appends: true), "ftruncate under an append waits")
        XCTAssertFalse(policy.setAttributesUnderOpenWaitsForReaders(sizeChanges: false, appends: true), "fchmod under an append does not")
        XCTAssertFalse(policy.setAttributesUnderOpenWaitsForReaders(sizeChanges: true, appends: false), "covered by a write that waited")
    }

    func testAPresenterThatDoesNotAnswerIsPassedOverUnlessStrict() {
        let lenient = policy.waits(write: true, .init(askTimeout: 2))
        XCTAssertEqual(lenient.askDeadline, .seconds(2))
        XCTAssertEqual(lenient.onAskTimeout, .proceed)
        for write in [false, true] {
            XCTAssertEqual(policy.waits(write: write, .init(askTimeout: 0.5, strict: true)).onAskTimeout, .strict, "ETIMEDOUT")
            XCTAssertEqual(policy.waits(write: write, .init(askTimeout: 0.5, strict: true)).askDeadline, .milliseconds(500))
        }
    }

    // MARK: open

    func testOpenForReadingIsAReadForTheLifeOfTheHandle() throws {
        let plan = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: false, truncate: false)))
        XCTAssertEqual(plan.intents, [.readingIntent(with: doc)])
        XCTAssertFalse(plan.write)
        XCTAssertNil(plan.adopts, "a read never takes over a save")
        XCTAssertEqual(plan.first, [])
        XCTAssertEqual(plan.before, [], "a read keeps no version")
        XCTAssertFalse(plan.truncated)
        XCTAssertFalse(plan.quiet)
    }

    func testOpenForWritingIsAWriteThatKeepsTheLoadedVersionAndCanCompleteASave() throws {
        let plan = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: true, truncate: true)))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc)])
        XCTAssertTrue(plan.write)
        XCTAssertEqual(plan.adopts, doc, "the document of a save in progress comes back (vim writing anew)")
        XCTAssertEqual(plan.first, [.moveArrives(doc, unlessBackTo: nil)], "a document moved here moments ago is told moved first")
        XCTAssertEqual(plan.before, [.beforeInPlaceWrite(doc)])
        XCTAssertTrue(plan.truncated, "O_TRUNC is a change even without a write")
    }

    func testOpenOfAFileAnotherProcessJustCreatedTellsItsFolderFirst() throws {
        let plan = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: false, truncate: false, fresh: .byAnother)))
        XCTAssertEqual(plan.first, [.revealFresh(doc)])
        let own = try XCTUnwrap(policy.open(.init(path: doc, kind: .file, write: false, truncate: false, fresh: .byCaller)))
        XCTAssertEqual(own.first, [], "its creator opening it again tells nobody")
    }

    func testOpenOfATempNameIsQuietAndOnlyRegularFilesAreCoordinated() throws {
        let plan = try XCTUnwrap(policy.open(.init(path: path("dir/.doc.txt.swp"), kind: .file, write: true, truncate: false, tempName: true)))
        XCTAssertTrue(plan.quiet)
        XCTAssertFalse(plan.truncated)
        for kind in [ItemKind.directory, .other] {
            XCTAssertNil(policy.open(.init(path: doc, kind: kind, write: true, truncate: true)))
            XCTAssertFalse(policy.coordinatesOpen(of: kind))
        }
        XCTAssertNil(policy.open(.init(path: doc, kind: nil, write: false, truncate: false)))
    }

    // MARK: close of a write

    func testAWriteIsToldChangedOnlyAtCloseAndOnlyIfSomethingChanged() {
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: true)),
                       [.store(.didChange(doc)), .announce(.changed(doc)), .saved(doc)])
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: false)), [], "opened for writing, nothing written: nothing told")
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: false, attributesChanged: true)), [.announce(.changed(doc))],
                       "attributes alone (touch): a change of attributes, not of contents, for the store")
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: true, removed: true)), [], "never after the file was removed")
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: true, quiet: true)), [], "a temp name tells nobody")
        XCTAssertEqual(policy.close(.init(path: doc, contentsChanged: true, freshByOpener: true)), [],
                       "a new file is told when it appears, with what its creator wrote")
    }

    // MARK: create

    func testCreateWritesTheNewFileForItsHandleAndTheFolderForTheCreate() {
        let plan = withoutSaves.create(.init(path: doc, parent: dir, parentObserved: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc)])
        XCTAssertTrue(plan.write)
        XCTAssertEqual(plan.parentIntents, [.writingIntent(with: dir)], "the folder's presenters: relinquish to writer")
        XCTAssertEqual(plan.created, [.announce(.subitemAppeared(doc))])
        XCTAssertTrue(plan.truncated, "created: a change even without a write")
        XCTAssertFalse(plan.quiet)
        XCTAssertEqual(plan.adopts, doc, "the document of a save in progress comes back (emacs, git checkout)")
        XCTAssertEqual(policy.create(.init(path: doc, parent: dir)).created, [.announce(.subitemAppeared(doc))],
                       "no presented folder above: told at once")
    }

    func testANewFileUnderAPresentedFolderIsToldOnceItOutlivesTheSaveWindow() {
        XCTAssertEqual(policy.create(.init(path: doc, parent: dir, parentObserved: true)).created, [.appearsLater(doc)])
        XCTAssertEqual(policy.create(.init(path: doc, parent: dir, parentObserved: true, presented: true)).created,
                       [.announce(.subitemAppeared(doc))], "a name somebody presents is told at once")
    }

    func testATempFileIsCreatedWithoutAskingOrTellingTheFolder() {
        let lock = path("dir/.~lock.doc.txt#")
        let plan = policy.create(.init(path: lock, parent: dir, tempName: true, parentObserved: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: lock)])
        XCTAssertEqual(plan.parentIntents, [])
        XCTAssertEqual(plan.created, [])
        XCTAssertTrue(plan.quiet)
    }

    // MARK: mkdir, mknod, symlink, link

    func testMkdirMknodSymlinkAndLinkAreAShortWriteOnTheFolderAndAppear() {
        let plan = policy.make(other, in: dir, tempName: false)
        XCTAssertEqual(plan.intents, [.writingIntent(with: dir)])
        XCTAssertEqual(plan.before, [])
        XCTAssertEqual(plan.done, [.announce(.subitemAppeared(other))])
        XCTAssertEqual(policy.make(path("dir/4913"), in: dir, tempName: true).done, [], "a temp name does not appear")
    }

    /// A symbolic link or node under a presented folder appears as a created file does: once it
    /// outlives save_window (a probe its maker removes before that never appears); a folder, a
    /// hard link, a presented name or save_window=0 at once.
    func testASymlinkOrNodeUnderAPresentedFolderAppearsAsACreatedFileDoes() {
        XCTAssertEqual(policy.make(other, in: dir, tempName: false, leaf: true, parentObserved: true).done, [.appearsLater(other)])
        XCTAssertEqual(policy.make(other, in: dir, tempName: false, leaf: true, parentObserved: false).done, [.announce(.subitemAppeared(other))])
        XCTAssertEqual(policy.make(other, in: dir, tempName: false, leaf: false, parentObserved: true).done, [.announce(.subitemAppeared(other))])
        XCTAssertEqual(policy.make(other, in: dir, tempName: false, leaf: true, parentObserved: true, presented: true).done,
                       [.announce(.subitemAppeared(other))])
        XCTAssertEqual(withoutSaves.make(other, in: dir, tempName: false, leaf: true, parentObserved: true).done,
                       [.announce(.subitemAppeared(other))])
        XCTAssertEqual(policy.make(path("dir/4913"), in: dir, tempName: true, leaf: true, parentObserved: true).done, [])
    }

    /// An unnamed file (O_TMPFILE) linked in: a new file of its linker's, under a create's rules.
    func testLinkingAnUnnamedFileInIsACreateOfItsName() {
        let plan = withoutSaves.linkUnnamed(.init(path: other, parent: dir, parentObserved: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: other), .writingIntent(with: dir)], "the name and its folder are written")
        XCTAssertEqual(plan.done, [.announce(.subitemAppeared(other))])
        XCTAssertEqual(policy.linkUnnamed(.init(path: other, parent: dir, parentObserved: true)).done, [.appearsLater(other)],
                       "under a presented folder: told once it outlives save_window (renamed over a document before, a save's temp file)")
        XCTAssertEqual(policy.linkUnnamed(.init(path: other, parent: dir)).done, [.announce(.subitemAppeared(other))], "no presented folder: at once")
        XCTAssertEqual(policy.linkUnnamed(.init(path: doc, parent: dir, parentObserved: true, presented: true)).done,
                       [.announce(.subitemAppeared(doc)), .store(.didChange(doc)), .announce(.changed(doc)), .saved(doc)],
                       "a presented name: its document changed, as after a create's close")
        let temp = policy.linkUnnamed(.init(path: path("dir/doc.txt.tmp"), parent: dir, tempName: true, parentObserved: true))
        XCTAssertEqual(temp.intents, [.writingIntent(with: path("dir/doc.txt.tmp"))], "a temp name: its folder is not asked")
        XCTAssertEqual(temp.done, [], "nor told")
    }

    /// A file linked in where a presented document was unlinked moments ago (`rm doc; ln copy
    /// doc`): the document comes back, under the access its unlink took, as a create brings it back.
    func testAFileLinkedInWhereASaveIsInProgressBringsTheDocumentBack() {
        let plan = policy.linkBack(doc)
        XCTAssertEqual(plan.adopts, doc, "under the save's access")
        XCTAssertEqual(plan.intents, [])
        XCTAssertEqual(plan.done, [.store(.didChange(doc)), .announce(.changed(doc)), .saved(doc)], "one did change, no appearance")
    }

    // MARK: truncate, chmod, chown, utimens

    func testTruncateByPathIsAWriteAndAChangeOfContents() throws {
        XCTAssertEqual(policy.setAttributesPrelude(doc), [.moveArrives(doc, unlessBackTo: nil)])
        let plan = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: true)))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc)])
        XCTAssertEqual(plan.before, [.beforeInPlaceWrite(doc)])
        XCTAssertEqual(plan.done, [.store(.didChange(doc)), .announce(.changed(doc))])
    }

    func testChmodByPathIsAMetadataWriteAndNotAChangeOfContents() throws {
        let plan = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: false)))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc, options: .contentIndependentMetadataOnly)])
        XCTAssertEqual(plan.before, [], "no version kept")
        XCTAssertEqual(plan.done, [.announce(.changed(doc))], "presenters hear; the store does not")
        let temp = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: true, tempName: true)))
        XCTAssertEqual(temp.done, [])
        let fresh = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: false, fresh: .byCaller)))
        XCTAssertEqual(fresh.done, [], "its creator setting its mode: still nobody's business")
        XCTAssertEqual(fresh.first, [], "and still fresh")
        let another = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: false, fresh: .byAnother)))
        XCTAssertEqual(another.first, [.revealFresh(doc)])
    }

    func testAttributesSetOnAFileTheCallerHoldsOpenForWritingAreCoveredByThatOpen() {
        XCTAssertEqual(policy.setAttributesUnderOpenWrite(sizeChanges: true), .contents, "ftruncate: folded into the open's change")
        XCTAssertEqual(policy.setAttributesUnderOpenWrite(sizeChanges: false), .attributes, "fchmod: a change of attributes at close")
    }

    func testAttributesSetByPathRightAfterTheCallersOwnSaveArePartOfThatSave() throws {
        XCTAssertNil(policy.setAttributes(.init(path: doc, sizeChanges: false, afterOwnSave: true)), "install's chmod after its save")
        let truncate = try XCTUnwrap(policy.setAttributes(.init(path: doc, sizeChanges: true, afterOwnSave: true)))
        XCTAssertEqual(truncate.done.last, .announce(.changed(doc)), "a size change is a change of its own")
    }

    // MARK: unlink, rmdir

    func testUnlinkOfAFileIsAWriteForDeletingThatTellsDidDelete() {
        XCTAssertEqual(policy.removePrelude(doc, directory: false), [.finishWrites(doc), .moveArrives(doc, unlessBackTo: nil)],
                       "the caller's write is told before its file goes, and a move that arrived here first")
        let plan = policy.remove(.init(path: doc, directory: false))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc, options: .forDeleting)])
        XCTAssertEqual(plan.before, [.beforeDelete(doc)])
        XCTAssertEqual(plan.done, [.store(.didDelete(doc)), .announce(.deleted(doc))])
        XCTAssertFalse(plan.revealsSettledOnFailure)
    }

    func testRmdirIsAWriteForDeletingWithoutTheStore() {
        XCTAssertEqual(policy.removePrelude(dir, directory: true), [])
        let plan = policy.remove(.init(path: dir, directory: true, presented: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: dir, options: .forDeleting)])
        XCTAssertEqual(plan.before, [])
        XCTAssertEqual(plan.done, [.announce(.deleted(dir))], "a presented folder is deleted, never a save")
    }

    func testUnlinkOfAPresentedDocumentIsTheFirstHalfOfASave() {
        let plan = policy.remove(.init(path: doc, directory: false, presented: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc)], "relinquish to writer, not accommodate deletion")
        XCTAssertEqual(plan.before, [.beforeDelete(doc)])
        XCTAssertEqual(plan.done, [.beginSave(doc, .deleted, otherwise: .deleted(doc))])
        let off = withoutSaves.remove(.init(path: doc, directory: false, presented: true))
        XCTAssertEqual(off.intents, [.writingIntent(with: doc, options: .forDeleting)], "save_window=0: a deletion at once")
        XCTAssertEqual(off.done, [.store(.didDelete(doc)), .announce(.deleted(doc))])
    }

    func testUnlinkOfATempNameOrOfAFileItsCreatorJustMadeTellsNobody() {
        let swap = path("dir/.doc.txt.swp")
        let temp = policy.remove(.init(path: swap, directory: false, tempName: true, presented: true))
        XCTAssertEqual(temp.intents, [.writingIntent(with: swap)], "the folder's presenters are not asked to accommodate")
        XCTAssertEqual(temp.done, [.store(.didDelete(swap))])
        let fresh = policy.remove(.init(path: other, directory: false, fresh: .byCaller))
        XCTAssertEqual(fresh.first, [.settleFresh(other)])
        XCTAssertEqual(fresh.intents, [.writingIntent(with: other)])
        XCTAssertEqual(fresh.done, [.store(.didDelete(other))])
        XCTAssertTrue(fresh.revealsSettledOnFailure, "a file that stays after all is told")
        let byAnother = policy.remove(.init(path: other, directory: false, fresh: .byAnother))
        XCTAssertEqual(byAnother.first, [.revealFresh(other)], "another process removes it: it appeared, then it is deleted")
        XCTAssertEqual(byAnother.done.last, .announce(.deleted(other)))
    }

    // MARK: changes made directly in the backing folder

    func testABackingChangeFirstTellsADocumentMovedToItsPaths() {
        let to = path("elsewhere/doc.txt")
        XCTAssertEqual(policy.backingChangePrelude([doc]), [.moveArrives(doc, unlessBackTo: nil)], "written, truncated or removed")
        XCTAssertEqual(policy.backingChangePrelude([to, doc]), [.moveArrives(to, unlessBackTo: nil), .moveArrives(doc, unlessBackTo: nil)],
                       "renamed: both names, a rename back included (seen after it happened, nothing to adopt)")
        XCTAssertEqual(policy.backingChangePrelude([]), [])
    }

    // MARK: rename

    func testRenameMovesThePresentersAndTheStore() {
        let to = path("elsewhere/doc.txt")
        XCTAssertEqual(policy.renamePrelude(from: doc, to: to),
                       [.finishWrites(doc), .moveArrives(to, unlessBackTo: nil), .moveArrives(doc, unlessBackTo: to)])
        let plan = policy.rename(.init(source: doc, destination: to))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc, options: .forMoving)])
        XCTAssertEqual(plan.before, [])
        XCTAssertEqual(plan.done, [.store(.didMove(from: doc, to: to)), .announce(.moved(from: doc, to: to))])
        let folder = policy.rename(.init(source: dir, destination: path("moved"), sourceKind: .directory, sourcePresented: true))
        XCTAssertEqual(folder.done, [.store(.didMove(from: dir, to: path("moved"))), .announce(.moved(from: dir, to: path("moved")))],
                       "a folder moves the documents inside it")
    }

    func testRenameOverAnotherItemAsksItToAccommodateDeletion() {
        let plan = policy.rename(.init(source: doc, destination: other, destinationKind: .file, sourcePresented: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc, options: .forMoving), .writingIntent(with: other, options: .forReplacing)])
        XCTAssertEqual(plan.before, [.beforeReplace(other)])
        XCTAssertEqual(plan.done, [.store(.didDelete(other)), .store(.didMove(from: doc, to: other)), .announce(.moved(from: doc, to: other))])
        let overFolder = policy.rename(.init(source: dir, destination: path("b"), sourceKind: .directory, destinationKind: .directory,
                                             destinationPresented: true))
        XCTAssertEqual(overFolder.intents.last, .writingIntent(with: path("b"), options: .forReplacing), "folders are never a save")
    }

    func testRenameOfATempFileOverADocumentIsASave() {
        let temp = path("dir/sedAbC123")
        let plan = policy.rename(.init(source: temp, destination: doc, destinationKind: .file, sourceTempName: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: temp, options: .forMoving), .writingIntent(with: doc)],
                       "the document: relinquish to writer, not a deletion")
        XCTAssertNil(plan.adopts)
        XCTAssertEqual(plan.before, [.beforeReplace(doc)])
        XCTAssertEqual(plan.done, [.store(.didChange(doc)), .announce(.changed(doc)),
                                   .ifPresented(temp, [.store(.didMove(from: temp, to: doc)), .announce(.moved(from: temp, to: doc))]), .saved(doc)],
                       "the document's presenters hear of the change before a presented source moves there")
        // Any name over a presented document, and a file its creator just made under any name.
        let overPresented = policy.rename(.init(source: other, destination: doc, destinationKind: .file, destinationPresented: true))
        XCTAssertEqual(overPresented.intents.last, .writingIntent(with: doc))
        let fresh = policy.rename(.init(source: other, destination: doc, destinationKind: .file, sourceFresh: .byCaller))
        XCTAssertEqual(fresh.first, [.settleFresh(other)])
        XCTAssertEqual(fresh.intents.last, .writingIntent(with: doc))
        XCTAssertTrue(fresh.revealsSettledOnFailure)
    }

    func testARenameThatBringsADocumentBackCompletesTheSaveInProgress() {
        let temp = path("dir/.doc.txt.AbC123")
        let plan = policy.rename(.init(source: temp, destination: doc, sourceTempName: true, saveInProgressAtDestination: true))
        XCTAssertEqual(plan.adopts, doc)
        XCTAssertEqual(plan.intents, [.writingIntent(with: temp, options: .forMoving)], "the document's access is the save's")
        XCTAssertEqual(plan.before, [], "nothing at the name to keep")
        XCTAssertEqual(plan.done, [.store(.didChange(doc)), .announceAdopted(.changed(doc)),
                                   .ifPresented(temp, [.store(.didMove(from: temp, to: doc)), .announce(.moved(from: temp, to: doc))]), .saved(doc)])
        let folder = policy.rename(.init(source: dir, destination: doc, sourceKind: .directory, saveInProgressAtDestination: true))
        XCTAssertNil(folder.adopts, "only a file completes a save")
    }

    func testRenameOfAPresentedDocumentToANewNameIsTheFirstHalfOfASave() {
        let backup = path("dir/doc.txt~")
        let plan = policy.rename(.init(source: doc, destination: backup, destinationTempName: true, sourcePresented: true, sourceObserved: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc)], "relinquish to writer")
        XCTAssertEqual(plan.before, [.beforeReplace(doc)])
        XCTAssertEqual(plan.done, [.beginSave(doc, .renamed(to: backup, kept: false), otherwise: .moved(from: doc, to: backup))])
        let renamed = path("dir/renamed.txt")
        let anyName = policy.rename(.init(source: doc, destination: renamed, sourcePresented: true, sourceObserved: true))
        XCTAssertEqual(anyName.done, [.beginSave(doc, .renamed(to: renamed, kept: true), otherwise: .moved(from: doc, to: renamed))],
                       "any new name: the folder hears the backup name appeared if the save completes")
        let inFolder = policy.rename(.init(source: other, destination: path("dir/other.txt.bak~"), destinationTempName: true, sourceObserved: true))
        XCTAssertEqual(inFolder.intents, [.writingIntent(with: other)], "an item of a presented folder to a backup name")
        let notBackup = policy.rename(.init(source: other, destination: renamed, sourceObserved: true))
        XCTAssertEqual(notBackup.intents, [.writingIntent(with: other, options: .forMoving)], "to an ordinary name it is a move")
        let off = withoutSaves.rename(.init(source: doc, destination: backup, destinationTempName: true, sourcePresented: true, sourceObserved: true))
        XCTAssertEqual(off.intents, [.writingIntent(with: doc, options: .forMoving)], "save_window=0: a move")
        let over = policy.rename(.init(source: doc, destination: other, destinationKind: .other, sourcePresented: true))
        XCTAssertEqual(over.intents.last, .writingIntent(with: other, options: .forReplacing), "onto an existing item: not a backup")
        // The backup of an earlier save is there already (mv -b, cp --backup, rsync -b, emacs in a
        // new session): it is replaced, and the document's save begins all the same.
        let overBackup = policy.rename(.init(source: doc, destination: backup, destinationKind: .file, destinationTempName: true,
                                             sourcePresented: true, sourceObserved: true))
        XCTAssertEqual(overBackup.intents, [.writingIntent(with: doc), .writingIntent(with: backup, options: .forReplacing)])
        XCTAssertEqual(overBackup.before, [.beforeReplace(doc), .beforeReplace(backup)])
        XCTAssertEqual(overBackup.done, [.store(.didDelete(backup)),
                                         .beginSave(doc, .renamed(to: backup, kept: false), otherwise: .moved(from: doc, to: backup))])
        let overPresented = policy.rename(.init(source: doc, destination: other, destinationKind: .file, sourcePresented: true,
                                                destinationPresented: true))
        XCTAssertNil(overPresented.done.first { if case .beginSave = $0 { true } else { false } }, "over a presented document: a move")
    }

    func testRenameWithExchangeChangesBothPaths() {
        let plan = policy.rename(.init(source: doc, destination: other, exchange: true, destinationKind: .file, sourcePresented: true))
        XCTAssertEqual(plan.intents, [.writingIntent(with: doc, options: .forMoving), .writingIntent(with: other, options: .forMoving)])
        XCTAssertEqual(plan.before, [.beforeReplace(doc), .beforeReplace(other)])
        XCTAssertEqual(plan.done, [.store(.didChange(doc)), .store(.didChange(other)), .announce(.changed(doc)), .announce(.changed(other))])
    }

    /// An atomic swap save (renameat2 with RENAME_EXCHANGE): a file its caller made moments ago,
    /// or one of a temp name, exchanged with a document is that document's save, one did change,
    /// asked as a rename over it; the new file's name stays its caller's temp file (nothing settled,
    /// nothing told of it, so its removal next tells nobody).
    func testAnExchangeWithAFileItsCallerJustMadeIsASaveOfTheDocument() {
        let save: [Step] = [.store(.didChange(doc)), .announce(.changed(doc)), .saved(doc)]
        let fresh = policy.rename(.init(source: other, destination: doc, exchange: true, destinationKind: .file, sourceFresh: .byCaller))
        XCTAssertEqual(fresh.first, [], "the new file stays its caller's: it removes it next")
        XCTAssertEqual(fresh.intents, [.writingIntent(with: other, options: .forMoving), .writingIntent(with: doc)])
        XCTAssertEqual(fresh.before, [.beforeReplace(doc)])
        XCTAssertEqual(fresh.done, save)
        XCTAssertFalse(fresh.revealsSettledOnFailure)
        let reversed = policy.rename(.init(source: doc, destination: other, exchange: true, destinationKind: .file, destinationFresh: .byCaller))
        XCTAssertEqual(reversed.done, save, "the document named first")
        let temp = policy.rename(.init(source: path("dir/doc.tmp"), destination: doc, exchange: true, destinationKind: .file, sourceTempName: true))
        XCTAssertEqual(temp.done, save)
        // Made by another process, both new, or both documents: a change at both paths.
        for facts in [OperationPolicy.Rename(source: other, destination: doc, exchange: true, destinationKind: .file, sourceFresh: .byAnother),
                      .init(source: other, destination: doc, exchange: true, destinationKind: .file, sourceFresh: .byCaller, destinationFresh: .byCaller),
                      .init(source: other, destination: doc, exchange: true, destinationKind: .file)] {
            XCTAssertEqual(policy.rename(facts).done.filter { if case .announce = $0 { true } else { false } },
                           [.announce(.changed(other)), .announce(.changed(doc))], "\(facts)")
        }
        let folder = policy.rename(.init(source: dir, destination: doc, exchange: true, sourceKind: .directory, destinationKind: .file, sourceFresh: .byCaller))
        XCTAssertEqual(folder.done.count, 4, "a folder and a file: both changed")
        // The document saved, as the lost-update rules see it (`LostUpdates.RenameSave`).
        XCTAssertEqual(OperationPolicy.Rename(source: other, destination: doc, exchange: true, destinationKind: .file, sourceFresh: .byCaller).swapSavedDocument, doc)
        XCTAssertEqual(OperationPolicy.Rename(source: doc, destination: other, exchange: true, destinationKind: .file, destinationFresh: .byCaller).swapSavedDocument, doc)
        XCTAssertNil(OperationPolicy.Rename(source: other, destination: doc, exchange: true, destinationKind: .file).swapSavedDocument, "two documents")
        XCTAssertNil(OperationPolicy.Rename(source: other, destination: doc, destinationKind: .file, sourceFresh: .byCaller).swapSavedDocument, "no exchange")
    }

    func testTempNamesAreNeverReportedByARename() {
        let temp = path("dir/.goutputstream-XYZ"), swap = path("dir/doc.tmp")
        let named = policy.rename(.init(source: temp, destination: doc, sourceTempName: true))
        XCTAssertEqual(named.done, [.store(.didMove(from: temp, to: doc)), .announce(.subitemAppeared(doc))],
                       "written under a temp name, then named: a new document appears")
        let tempToTemp = policy.rename(.init(source: temp, destination: swap, sourceTempName: true, destinationTempName: true))
        XCTAssertEqual(tempToTemp.done, [.store(.didMove(from: temp, to: swap))])
        let freshNamed = policy.rename(.init(source: other, destination: path("dir/final.txt"), sourceFresh: .byCaller))
        XCTAssertEqual(freshNamed.done.last, .announce(.subitemAppeared(path("dir/final.txt"))))
        let freshFolder = policy.rename(.init(source: dir, destination: path("d2"), sourceKind: .directory, sourceFresh: .byCaller))
        XCTAssertEqual(freshFolder.first, [], "only files are fresh")
        XCTAssertEqual(freshFolder.done.last, .announce(.moved(from: dir, to: path("d2"))))
    }
}

func path(_ s: String) -> ItemPath { try! ItemPath(s) }
