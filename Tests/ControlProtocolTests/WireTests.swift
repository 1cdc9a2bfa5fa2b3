import XCTest
@testable import ControlProtocol

final class WireTests: XCTestCase {
    func testEveryMessageRoundTrips() throws {
        var typesSeen = Set<String>()
        for message in Samples.all {
            let frame = message.encodedFrame()
            var decoder = FrameDecoder()
            decoder.append(frame)
            let payload = try XCTUnwrap(try decoder.nextFrame())
            XCTAssertEqual(try ControlMessage.decode(payload: payload), message, String(decoding: payload, as: UTF8.self))
            XCTAssertNil(try decoder.nextFrame())
            typesSeen.insert(message.typeName)
        }
        let catalog = ControlMessage.catalog.map { $0.wireName }
        XCTAssertEqual(Set(catalog).count, catalog.count, "a wire name is used twice in ControlMessage.catalog")
        XCTAssertEqual(typesSeen, Set(catalog), "every message of ControlMessage.catalog needs a sample in Samples.all (and nothing else)")
    }

    /// The wire format does not change: payloads recorded before the message catalog decode to the
    /// same samples, and the samples encode to the same bytes.
    func testRecordedPayloadsDecodeAndEncodeAsBefore() throws {
        XCTAssertEqual(RecordedPayloads.all.count, Samples.all.count)
        for (recorded, sample) in zip(RecordedPayloads.all, Samples.all) {
            XCTAssertEqual(try ControlMessage.decode(payload: Array(recorded.utf8)), sample, recorded)
            XCTAssertEqual(String(decoding: sample.encodedPayload(), as: UTF8.self), recorded)
        }
    }

    /// Each message of the catalog, through its samples, is strict about every field it writes:
    /// a field of the wrong JSON type is refused with an error naming it, and a field left out
    /// either was optional (the message still decodes) or is refused by name, with the request's
    /// id once it was read.
    func testEveryMessageIsStrictAboutEachField() throws {
        for sample in Samples.all {
            let object = sample.jsonObject
            let freeForm: Bool
            if case .notification(let n) = sample, case .unknown = n.event { freeForm = true } else { freeForm = false }
            for key in object.keys where key != "type" {
                var without = object
                without[key] = nil
                do {
                    _ = try ControlMessage.decode(without)
                } catch {
                    XCTAssertTrue(error.message.contains("\"\(key)\""), "\(sample.typeName) without \(key): \(error.message)")
                    if key != "id", let id = sample.requestID { XCTAssertEqual(error.requestID, id.rawValue, error.message) }
                }
                if freeForm && !["presenter", "event"].contains(key) { continue }
                var wrong = object
                if case .array = object[key]! { wrong[key] = .string("x") } else { wrong[key] = .array([]) }
                XCTAssertThrowsError(try ControlMessage.decode(wrong), "\(sample.typeName) with \(key) of the wrong type") { error in
                    let error = error as! ProtocolError
                    XCTAssertTrue(error.message.contains("\"\(key)\""), "\(sample.typeName) with a wrong \(key): \(error.message)")
                }
            }
        }
    }

    func testWireFormatIsTheDocumentedOne() throws {
        let hello = ControlMessage.hello(Hello(id: RequestID(1), versions: [1], client: "py"))
        XCTAssertEqual(String(decoding: hello.encodedPayload(), as: UTF8.self), #"{"type":"hello","id":1,"versions":[1],"client":"py"}"#)
        let frame = hello.encodedFrame()
        XCTAssertEqual(Array(frame.prefix(4)), [0, 0, 0, UInt8(frame.count - 4)])
        let ask = ControlMessage.ask(Ask(id: AskID(4), presenter: PresenterID(2), kind: .save, path: Samples.path("a.txt"), deadlineMs: 500))
        XCTAssertEqual(String(decoding: ask.encodedPayload(), as: UTF8.self),
                       #"{"type":"ask","id":4,"presenter":2,"ask":"save","path":"a.txt","deadlineMs":500}"#)
        let coordinate = ControlMessage.coordinate(Coordinate(id: RequestID(3), intents: [.writing(Samples.path("a"), options: [.forDeleting])]))
        XCTAssertEqual(String(decoding: coordinate.encodedPayload(), as: UTF8.self),
                       #"{"type":"coordinate","id":3,"intents":[{"intent":"write","path":"a","options":["forDeleting"]}]}"#)
    }

    func testUnknownFieldsAreIgnoredAndNotificationEventsStayOpen() throws {
        let message = try ControlMessage.decode(payload: Array(#"{"type":"ok","id":5,"future":{"a":[1,2]}}"#.utf8))
        XCTAssertEqual(message, .ok(OK(id: RequestID(5))))
        let event = try ControlMessage.decode(payload: Array(#"{"type":"notification","presenter":3,"event":"didTeleport","to":"x"}"#.utf8))
        XCTAssertEqual(event, .notification(PresenterNotification(presenter: PresenterID(3), event: .unknown(event: "didTeleport", fields: JSONObject(["to": .string("x")])))))
    }

    func testFramesSplitAtEveryByteBoundary() throws {
        let stream = Samples.all.flatMap { $0.encodedFrame() }
        for chunk in [1, 2, 3, 7, 64, 1000] {
            var decoder = FrameDecoder()
            var decoded: [ControlMessage] = []
            var offset = 0
            while offset < stream.count {
                decoder.append(stream[offset..<min(offset + chunk, stream.count)])
                offset += chunk
                while let payload = try decoder.nextFrame() { decoded.append(try ControlMessage.decode(payload: payload)) }
            }
            try decoder.finish()
            XCTAssertEqual(decoded, Samples.all, "chunk size \(chunk)")
        }
    }

    func testJSONParserAcceptsRFC8259() throws {
        let cases: [(String, JSONValue)] = [
            (#" {"a" : [1, -2, 3.5e2, 0.25, -0, true, false, null], "b": "\u00e9\ud83d\ude00\n\/"} "#,
             .object(JSONObject(["a": .array([.int(1), .int(-2), .double(350), .double(0.25), .int(0), .bool(true), .bool(false), .null]),
                                 "b": .string("é😀\n/")]))),
            ("[]", .array([])), ("{}", .object(JSONObject())), (#""héllo""#, .string("héllo")),
            ("9223372036854775807", .int(Int64.max)), ("9223372036854775808", .double(9223372036854775808)),
            ("1E400", .null),  // placeholder, checked below as an error
        ]
        for (text, expected) in cases.dropLast() {
            XCTAssertEqual(try JSONParser.parse(Array(text.utf8)), expected, text)
        }
        XCTAssertThrowsError(try JSONParser.parse(Array("1E400".utf8)))
        // Writer output parses back to the same value.
        for (_, value) in cases.dropLast() {
            XCTAssertEqual(try JSONParser.parse(JSONWriter.write(value)), value)
        }
        XCTAssertEqual(String(decoding: JSONWriter.write(.string("a\"\\\n\u{01}é")), as: UTF8.self), #""a\"\\\n\u0001é""#)
    }

    func testMountPathNormalisesAndRefusesEscapes() throws {
        XCTAssertEqual(try MountPath(validating: "a//b/./c/").rawValue, "a/b/c")
        XCTAssertEqual(try MountPath(validating: ".").isRoot, true)
        XCTAssertEqual(try MountPath(validating: "./").wireValue, ".")
        XCTAssertEqual(try MountPath(validating: "a/b").parent, try MountPath(validating: "a"))
        XCTAssertEqual(try MountPath(validating: "a").parent, .root)
        XCTAssertTrue(try MountPath(validating: "a").isAncestor(of: MountPath(validating: "a/b")))
        XCTAssertFalse(try MountPath(validating: "a").isAncestor(of: MountPath(validating: "ab")))
        XCTAssertTrue(MountPath.root.isAncestor(of: try MountPath(validating: "x")))
        for bad in ["", "/etc/passwd", "..", "a/../b", "a/..", "a\u{0}b", String(repeating: "x", count: 256),
                    String(repeating: "a/", count: 32_800)] {
            XCTAssertThrowsError(try MountPath(validating: bad), bad) { error in
                XCTAssertEqual((error as? ProtocolError)?.code, .invalidPath)
            }
        }
        XCTAssertNoThrow(try MountPath(validating: "...hidden/..x/x.."))
        // Past PATH_MAX but within 65,535 bytes: a deep item the mount coordinates.
        XCTAssertNoThrow(try MountPath(validating: String(repeating: "a/", count: 2100) + "z"))
    }

    func testMountInfoParsingAndSocketRule() throws {
        let text = """
            22 1 0:21 / /proc rw,nosuid - proc proc rw
            98 22 0:50 / /mnt/my\\040docs rw,nosuid,nodev,relatime shared:5 - fuse.coordfs /home/me/Shared\\040Stuff rw,user_id=0
            99 22 0:51 / /mnt/other rw - fuse.sshfs host:/x rw
            """
        let mounts = ControlSocketLocator.parseMountInfo(text)
        XCTAssertEqual(mounts.count, 3)
        XCTAssertEqual(mounts[1], .init(mountPoint: "/mnt/my docs", fileSystemType: "fuse.coordfs", source: "/home/me/Shared Stuff", owner: 0, device: "0:50"))
        XCTAssertNil(mounts[2].owner)
        XCTAssertEqual(ControlSocketLocator.defaultSocketPath(for: mounts[1]), "/home/me/Shared Stuff/.coordfs/control.sock")
        XCTAssertEqual(ControlSocketLocator.defaultSocketPath(backingFolder: "/srv/b/"), "/srv/b/.coordfs/control.sock")

        let dir = try TemporaryDirectory()
        let info = dir.path + "/mountinfo"
        try text.write(toFile: info)
        let locator = ControlSocketLocator(mountInfoPath: info)
        let found = try locator.locate("/mnt/my docs/sub/../notes.txt")
        XCTAssertEqual(found.socketPath, "/home/me/Shared Stuff/.coordfs/control.sock")
        XCTAssertEqual(found.relativePath, Samples.path("notes.txt"))
        XCTAssertEqual(try locator.locate("/mnt/my docs").relativePath, .root)
        XCTAssertThrowsError(try locator.locate("/mnt/other/x")) { XCTAssertEqual(($0 as? ProtocolError)?.code, .notFound) }
        XCTAssertThrowsError(try locator.locate("/mnt/my docsX/y"))
        let custom = ControlSocketLocator(mountInfoPath: info) { "/run/coordfs/" + $0.mountPoint.split(separator: "/").joined(separator: "-") + ".sock" }
        XCTAssertEqual(try custom.locate("/mnt/my docs/a").socketPath, "/run/coordfs/mnt-my docs.sock")
    }

    /// Where others may write the backing folder (not sticky), one of them can move the mount's
    /// `.coordfs` away and put a folder of its own there: the locator does not hand out a socket
    /// in a state folder that is not the mount's daemon's (`whyStateFolderIsNotTheMounts`).
    func testASocketInAStateFolderThatIsNotTheDaemonsIsNotLocated() throws {
        let dir = try TemporaryDirectory()
        let backing = dir.path + "/backing"
        let state = backing + "/.coordfs"
        XCTAssertEqual(mkdir(backing, 0o777), 0)
        XCTAssertEqual(mkdir(state, 0o711), 0)
        let info = dir.path + "/mountinfo"
        let uid = geteuid()
        try "98 22 0:50 / /mnt/shared rw - fuse.coordfs \(backing) rw,user_id=\(uid),group_id=0\n".write(toFile: info)
        let locator = ControlSocketLocator(mountInfoPath: info)
        XCTAssertEqual(try locator.locate("/mnt/shared/a").socketPath, state + "/control.sock")
        func refused(_ what: String, _ expected: String) {
            XCTAssertThrowsError(try locator.locate("/mnt/shared/a"), what) {
                XCTAssertEqual(($0 as? ProtocolError)?.code, .notFound, what)
                XCTAssertTrue("\($0)".contains(expected), "\(what): \($0)")
            }
        }
        XCTAssertEqual(chmod(state, 0o733), 0)
        refused("a state folder others may write", "may be written by other users")
        XCTAssertEqual(chmod(state, 0o711), 0)
        if uid == 0 {
            XCTAssertEqual(chown(state, 65534, 65534), 0)
            refused("another user's state folder", "belongs to uid 65534")
            XCTAssertEqual(chown(state, 0, 0), 0)
        }
        XCTAssertEqual(rename(state, backing + "/moved"), 0)
        XCTAssertEqual(symlink(backing + "/moved", state), 0)
        refused("a link in the state folder's place", "not a folder")
    }
}

final class PeerAccessTests: XCTestCase {
    func testPosixPermissionRules() {
        let user = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
        XCTAssertTrue(user.mayAccess(mode: 0o600, ownerUID: 1000, ownerGID: 5, write: true))
        XCTAssertFalse(user.mayAccess(mode: 0o400, ownerUID: 1000, ownerGID: 5, write: true))
        XCTAssertFalse(user.mayAccess(mode: 0o066, ownerUID: 1000, ownerGID: 1000, write: false), "the owner's bits decide for the owner")
        XCTAssertTrue(user.mayAccess(mode: 0o640, ownerUID: 0, ownerGID: 1000, write: false))
        XCTAssertFalse(user.mayAccess(mode: 0o640, ownerUID: 0, ownerGID: 1000, write: true))
        XCTAssertTrue(user.mayAccess(mode: 0o660, ownerUID: 0, ownerGID: 27, write: true, groups: [27]))
        XCTAssertFalse(user.mayAccess(mode: 0o660, ownerUID: 0, ownerGID: 27, write: false))
        XCTAssertTrue(user.mayAccess(mode: 0o604, ownerUID: 0, ownerGID: 0, write: false))
        XCTAssertTrue(PeerCredentials(pid: 1, uid: 0, gid: 0).mayAccess(mode: 0, ownerUID: 5, ownerGID: 5, write: true))
    }

    func testSupplementaryGroupsOfThisProcess() {
        let me = PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid())
        var groups = [gid_t](repeating: 0, count: 256)
        let count = getgroups(Int32(groups.count), &groups)
        XCTAssertEqual(Set(me.supplementaryGroups()), Set(groups.prefix(Int(max(count, 0)))))
        XCTAssertEqual(PeerCredentials(pid: Int32.max, uid: 0, gid: 0).supplementaryGroups(), [])
    }
}
