/// A machine-readable error code, as it travels in `error` frames and in failed answers.
///
/// The set is open: a peer may send codes this build does not know (a newer daemon, or an app
/// reporting its own failure in an answer). Known codes are the static members below; every one
/// of them is documented in `docs/protocol.md`.
public struct ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }

    // Framing and syntax: the connection is closed after these.
    /// The 4-byte length prefix announces more than the maximum frame size.
    public static let frameTooLarge: ErrorCode = "frameTooLarge"
    /// The stream ended in the middle of a frame.
    public static let truncatedFrame: ErrorCode = "truncatedFrame"
    /// A zero-length frame, or bytes that are not UTF-8.
    public static let malformedFrame: ErrorCode = "malformedFrame"
    /// The payload is not a single valid JSON value (or nests too deeply).
    public static let malformedJSON: ErrorCode = "malformedJSON"
    /// The payload is JSON but not an object with a string `type`.
    public static let invalidMessage: ErrorCode = "invalidMessage"
    /// The `type` is not one this version of the protocol defines.
    public static let unknownType: ErrorCode = "unknownType"
    /// `hello` offered no version this daemon speaks.
    public static let unsupportedVersion: ErrorCode = "unsupportedVersion"
    /// A message other than `hello` arrived before the handshake, or `hello` arrived twice.
    public static let notNegotiated: ErrorCode = "notNegotiated"

    // Field validation: the connection is closed after these too (the peer is broken).
    /// A required field is absent.
    public static let missingField: ErrorCode = "missingField"
    /// A field has the wrong JSON type (a string where a number belongs, ...).
    public static let wrongFieldType: ErrorCode = "wrongFieldType"
    /// A field has the right type but a value outside its domain (unknown option, id too big, ...).
    public static let invalidValue: ErrorCode = "invalidValue"
    /// A path is absolute, contains `..` or NUL, is empty or too long.
    public static let invalidPath: ErrorCode = "invalidPath"

    // Request errors: a reply to one request; the connection stays open.
    /// The message is valid but may not be sent in this direction (a client sending `granted`).
    public static let unexpectedMessage: ErrorCode = "unexpectedMessage"
    /// The peer may not read (present, coordinate-read) or write (coordinate-write) the item.
    public static let permissionDenied: ErrorCode = "permissionDenied"
    /// The path does not exist, or resolves outside the mount (a symlink out).
    public static let notFound: ErrorCode = "notFound"
    /// The presenter id is not registered on this connection.
    public static let unknownPresenter: ErrorCode = "unknownPresenter"
    /// The access id is not held by this connection.
    public static let unknownAccess: ErrorCode = "unknownAccess"
    /// The request waited longer than its timeout.
    public static let timedOut: ErrorCode = "timedOut"
    /// The request was refused because a limit was reached (presenters, accesses, queue length).
    public static let limitExceeded: ErrorCode = "limitExceeded"
    /// The daemon is shutting down.
    public static let shuttingDown: ErrorCode = "shuttingDown"
    /// The client cancelled the waiting request (`cancel`).
    public static let cancelled: ErrorCode = "cancelled"
    /// A bug or an unexpected system error in the daemon.
    public static let internalError: ErrorCode = "internalError"
    /// A presenter could not do what an ask required (used in failed answers).
    public static let failed: ErrorCode = "failed"

    // The document store (docs/protocol.md, "The document store").
    /// The mount runs without a document store (`store=off`).
    public static let storeUnavailable: ErrorCode = "storeUnavailable"
    /// The presenter's item is no document: a folder, a file that does not exist (yet), or one
    /// the store let go of (closed after a deletion).
    public static let notADocument: ErrorCode = "notADocument"
    /// No conflict with this id.
    public static let unknownConflict: ErrorCode = "unknownConflict"
    /// The conflict was resolved already.
    public static let alreadyResolved: ErrorCode = "alreadyResolved"
    /// The resolution does not apply: reload or merge of a deleted document.
    public static let notApplicable: ErrorCode = "notApplicable"
    /// Merge needs the presenter's base, which the store could not keep.
    public static let baseUnavailable: ErrorCode = "baseUnavailable"
    /// Merge is for text; one of the inputs is binary.
    public static let binaryContents: ErrorCode = "binaryContents"
    /// No kept version with this id.
    public static let unknownVersion: ErrorCode = "unknownVersion"
    /// The mount keeps no event log (`log=off`), or it cannot be read.
    public static let logUnavailable: ErrorCode = "logUnavailable"
}

/// A protocol violation or a refused request: a code and a sentence a human can act on.
///
/// The decoder throws only this type; it never traps on input.
public struct ProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    /// The `id` of the request the error is about, when the decoder got far enough to read it.
    /// A field error with a known id is answered and the connection stays open.
    public var requestID: UInt64?

    public init(_ code: ErrorCode, _ message: String, requestID: UInt64? = nil) {
        self.code = code
        self.message = message
        self.requestID = requestID
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// Whether a peer that caused this error must be disconnected: framing and syntax errors
    /// always, field errors when the request could not even be identified. Everything else is the
    /// refusal of one request.
    public var closesConnection: Bool {
        switch code {
        case .frameTooLarge, .truncatedFrame, .malformedFrame, .malformedJSON, .invalidMessage,
            .unknownType, .unsupportedVersion, .notNegotiated:
            return true
        case .missingField, .wrongFieldType, .invalidValue, .invalidPath:
            return requestID == nil
        default:
            return false
        }
    }
}
