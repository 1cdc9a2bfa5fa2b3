import XCTest
import Foundation
import SystemPackage
import Glibc
@testable import FuseKit

/// The INIT handshake's edits, on requests and replies laid out as the kernel's FUSE ABI has them
/// (flag values written out here, not taken from the shim, so a wrong constant there shows).
final class PassthroughHandshakeTests: XCTestCase {
    /// What a handshake said (for the daemon's log).
    private final class Said: @unchecked Sendable {
        private let lock = NSLock()
        private var storage: [String] = []
        var lines: [String] { lock.withLock { storage } }
        func append(_ line: String) { lock.withLock { storage.append(line) } }
    }
    private let said = Said()
    private func handshake(wanted: Bool) -> PassthroughHandshake {
        PassthroughHandshake(wanted: wanted) { [said] in said.append($0) }
    }

    private static let initExt: UInt32 = 1 << 30        // FUSE_INIT_EXT
    private static let passthrough2: UInt32 = 1 << 5    // FUSE_PASSTHROUGH (1 << 37) in flags2

    /// fuse_in_header (40 bytes) + fuse_init_in (64 bytes).
    private static let killPrivV2: UInt32 = 1 << 28     // FUSE_HANDLE_KILLPRIV_V2

    private func initRequest(unique: UInt64, passthrough: Bool, killPrivileges: Bool = false) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 104)
        bytes.withUnsafeMutableBytes { b in
            b.storeBytes(of: UInt32(104), toByteOffset: 0, as: UInt32.self)
            b.storeBytes(of: UInt32(26), toByteOffset: 4, as: UInt32.self)          // FUSE_INIT
            b.storeBytes(of: unique, toByteOffset: 8, as: UInt64.self)
            b.storeBytes(of: UInt32(7), toByteOffset: 40, as: UInt32.self)          // major
            b.storeBytes(of: UInt32(40), toByteOffset: 44, as: UInt32.self)         // minor
            b.storeBytes(of: Self.initExt | 1 | (killPrivileges ? Self.killPrivV2 : 0), toByteOffset: 52, as: UInt32.self)   // flags
            b.storeBytes(of: passthrough ? Self.passthrough2 : 0, toByteOffset: 56, as: UInt32.self)
        }
        return bytes
    }

    /// Runs libfuse's INIT reply (fuse_out_header + 64-byte fuse_init_out with `flags`) through the
    /// hook; returns the body the device would get.
    private func answer(_ shake: PassthroughHandshake, unique: UInt64, error: Int32 = 0, flags: UInt32 = 0x1234) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: 16)
        header.withUnsafeMutableBytes { h in
            h.storeBytes(of: UInt32(error == 0 ? 80 : 16), toByteOffset: 0, as: UInt32.self)
            h.storeBytes(of: error, toByteOffset: 4, as: Int32.self)
            h.storeBytes(of: unique, toByteOffset: 8, as: UInt64.self)
        }
        var body = [UInt8](repeating: 0, count: 64)
        body.withUnsafeMutableBytes { $0.storeBytes(of: flags, toByteOffset: 12, as: UInt32.self) }
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 8)
        defer { copy.deallocate() }
        return header.withUnsafeMutableBytes { h in
            body.withUnsafeMutableBytes { b in
                var iov = [iovec(iov_base: h.baseAddress, iov_len: 16), iovec(iov_base: b.baseAddress, iov_len: 64)]
                shake.editInitReply(&iov, 2, into: copy)
                return Array(UnsafeRawBufferPointer(start: iov[1].iov_base, count: 64))
            }
        }
    }

    private func word(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
    }

    func testOfferedPassthroughIsTakenWithAStackDepth() {
        let shake = handshake(wanted: true)
        initRequest(unique: 7, passthrough: true).withUnsafeBytes { shake.read($0) }
        XCTAssertNil(shake.unavailable, "not known before INIT is answered")
        let body = answer(shake, unique: 7)
        XCTAssertEqual(word(body, at: 12), 0x1234 | Self.initExt, "libfuse's flags kept, FUSE_INIT_EXT added")
        XCTAssertEqual(word(body, at: 32), Self.passthrough2, "FUSE_PASSTHROUGH in flags2")
        XCTAssertEqual(word(body, at: 36), 2, "max_stack_depth")
        XCTAssertTrue(shake.enabled.load(ordering: .relaxed))
        XCTAssertNil(shake.unavailable)
        XCTAssertFalse(shake.awaitingInit)
        XCTAssertEqual(said.lines, [], "nothing to say")
    }

    /// With passthrough the daemon takes FUSE_HANDLE_KILLPRIV_V2 when offered: the kernel then skips
    /// a GETXATTR round trip before each write (the Loopback drops set-user-ID itself).
    func testOfferedKillPrivilegesV2IsTakenWithPassthrough() {
        let shake = handshake(wanted: true)
        initRequest(unique: 8, passthrough: true, killPrivileges: true).withUnsafeBytes { shake.read($0) }
        let body = answer(shake, unique: 8)
        XCTAssertEqual(word(body, at: 12), 0x1234 | Self.initExt | Self.killPrivV2)
        XCTAssertEqual(word(body, at: 32), Self.passthrough2)

        let without = handshake(wanted: false)
        initRequest(unique: 9, passthrough: true, killPrivileges: true).withUnsafeBytes { without.read($0) }
        XCTAssertEqual(word(answer(without, unique: 9), at: 12), 0x1234, "no passthrough asked for: the kernel keeps dropping privileges")
    }

    func testAKernelWithoutPassthroughGetsLibfusesReplyUnchanged() {
        let shake = handshake(wanted: true)
        initRequest(unique: 9, passthrough: false).withUnsafeBytes { shake.read($0) }
        let body = answer(shake, unique: 9)
        XCTAssertEqual(word(body, at: 12), 0x1234)
        XCTAssertEqual(word(body, at: 32), 0)
        XCTAssertFalse(shake.enabled.load(ordering: .relaxed))
        XCTAssertEqual(shake.unavailable, .notOffered)
        XCTAssertEqual(said.lines, ["coordfs: passthrough=on, but open files use the daemon: \(PassthroughUnavailable.notOffered)"])
    }

    func testNotAskedForMeansNoEditAndNoReason() {
        let shake = handshake(wanted: false)
        initRequest(unique: 3, passthrough: true).withUnsafeBytes { shake.read($0) }
        XCTAssertEqual(word(answer(shake, unique: 3), at: 32), 0)
        XCTAssertFalse(shake.enabled.load(ordering: .relaxed))
        XCTAssertNil(shake.unavailable)
        XCTAssertEqual(said.lines, [], "passthrough=off: nothing to say")
    }

    func testOnlyTheReplyToInitIsEdited() {
        let shake = handshake(wanted: true)
        initRequest(unique: 11, passthrough: true).withUnsafeBytes { shake.read($0) }
        XCTAssertEqual(word(answer(shake, unique: 12), at: 32), 0, "another request's reply")
        XCTAssertTrue(shake.awaitingInit)
        XCTAssertEqual(word(answer(shake, unique: 11, error: -EPROTO), at: 32), 0, "a failed INIT")
        XCTAssertFalse(shake.enabled.load(ordering: .relaxed))
    }

    func testRefusedRegistrationsAreKeptAndEPERMTurnsPassthroughOff() {
        let shake = handshake(wanted: true)
        initRequest(unique: 5, passthrough: true).withUnsafeBytes { shake.read($0) }
        _ = answer(shake, unique: 5)
        shake.registrationFailed(.tooManySymbolicLinkLevels)
        XCTAssertTrue(shake.enabled.load(ordering: .relaxed), "ELOOP is one file's: the others may still register")
        XCTAssertEqual(shake.unavailable, .registrationRefused(.tooManySymbolicLinkLevels))
        shake.registrationFailed(.notPermitted)
        XCTAssertFalse(shake.enabled.load(ordering: .relaxed), "EPERM: no file can be registered")
        XCTAssertEqual(shake.unavailable, .registrationRefused(.tooManySymbolicLinkLevels), "the first reason is kept")
        XCTAssertEqual(said.lines.count, 1, "said once: \(said.lines)")
        XCTAssertTrue(said.lines.first?.contains("stacked too deep") == true, "\(said.lines)")
        XCTAssertTrue(PassthroughUnavailable.registrationRefused(.notPermitted).description.contains("CAP_SYS_ADMIN"))
    }
}
