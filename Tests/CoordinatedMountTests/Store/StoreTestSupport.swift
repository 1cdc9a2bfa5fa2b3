import XCTest
import Foundation
import Glibc
import Synchronization
@testable import CoordFS
import Coordination
import DocumentStore

/// A document presenter that records the coordinator's messages ("relinquishToWriter",
/// "didChange", ...) and the store's events, in order.
final class DocumentRecorder: DocumentPresenter, @unchecked Sendable {
    let path: ItemPath
    private let entries = Mutex<[String]>([])
    private let received = Mutex<[DocumentChangeEvent]>([])

    init(path: ItemPath) { self.path = path }

    var presentedItemPath: ItemPath? { path }
    var log: [String] { entries.withLock { $0 } }
    var events: [DocumentChangeEvent] { received.withLock { $0 } }
    private func record(_ s: String) { entries.withLock { $0.append(s) } }

    func relinquishPresentedItem(toWriter writer: AccessOrigin) async -> Reacquirer? { record("relinquishToWriter"); return nil }
    func accommodatePresentedItemDeletion() async throws { record("accommodateDeletion") }
    func presentedItemDidChange() async { record("didChange") }
    func presentedItemDidMove(to newPath: ItemPath) async { record("didMove \(newPath)") }
    func presentedDocumentDidChangeUnderneath(_ event: DocumentChangeEvent) async {
        received.withLock { $0.append(event) }
        record("underlying \(event.kind.rawValue)")
    }

    /// Waits until at least `count` store events arrived (or the timeout), then `settle` seconds
    /// more so that a second, unwanted event would show up too.
    @discardableResult
    func waitForEvents(_ count: Int = 1, timeout: Double = 5, settle: Double = 0.6) -> [DocumentChangeEvent] {
        let deadline = Date().addingTimeInterval(timeout)
        while events.count < count && Date() < deadline { usleep(10_000) }
        usleep(UInt32(settle * 1_000_000))
        return events
    }
}

/// An in-process coordinated mount with its document store.
class StoreMountTestCase: InProcessMountTestCase {
    var service: StoreService { daemon.store! }
    var store: DocumentStore { service.documentStore }

    /// Registers a document presenter (coordinator and store) for a mount-relative path.
    func presentDocument(_ relative: String, unsaved: Bool = false) throws -> (DocumentRecorder, PresenterID) {
        let p = DocumentRecorder(path: try ItemPath(relative))
        let id = try daemon.addDocumentPresenter(p)
        if unsaved { try service.setUnsavedChanges(id, true) }
        return (p, id)
    }

    func backingText(_ relative: String) -> String? { try? String(contentsOfFile: backing + "/" + relative, encoding: .utf8) }

    /// The bytes of every kept version of a document, newest first.
    func keptTexts(_ relative: String) throws -> [String] {
        try store.versions(ofPath: relative).map { String(decoding: try store.contents(of: $0.id), as: UTF8.self) }
    }

    /// The single conflict of a single event (fails otherwise).
    func conflict(of events: [DocumentChangeEvent], file: StaticString = #filePath, line: UInt = #line) throws -> Conflict {
        XCTAssertEqual(events.count, 1, "one underlying-file-changed event: \(events)", file: file, line: line)
        guard let event = events.first, case .conflict(let id) = event.action else {
            XCTFail("no conflict in \(events)", file: file, line: line)
            throw MissingConflict()
        }
        return try store.conflict(id)
    }
}

struct MissingConflict: Error {}
