import Glibc

/// A UTC wall-clock instant with millisecond resolution: the `time` of a record.
///
/// Formatted as ISO 8601 with milliseconds and a `Z` (`2026-11-21T20:14:26.123Z`). The conversion
/// is done by hand (days-from-civil arithmetic) because it runs for every formatted record and
/// Foundation's date formatters are slow and locale-sensitive.
public struct EventTime: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public var millisecondsSinceEpoch: Int64

    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = millisecondsSinceEpoch
    }

    /// The current wall-clock time (`CLOCK_REALTIME`).
    public static func now() -> EventTime {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return EventTime(millisecondsSinceEpoch: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }

    public static func < (a: EventTime, b: EventTime) -> Bool {
        a.millisecondsSinceEpoch < b.millisecondsSinceEpoch
    }

    /// Broken-down UTC fields.
    public struct Components: Sendable, Equatable {
        public var year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, millisecond: Int
    }

    /// The UTC calendar fields of this instant (proleptic Gregorian calendar).
    public var components: Components {
        let ms = millisecondsSinceEpoch
        var days = ms / 86_400_000
        var msOfDay = ms % 86_400_000
        if msOfDay < 0 { msOfDay += 86_400_000; days -= 1 }
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        return Components(
            year: Int(y), month: Int(m), day: Int(d),
            hour: Int(msOfDay / 3_600_000), minute: Int(msOfDay / 60_000 % 60),
            second: Int(msOfDay / 1000 % 60), millisecond: Int(msOfDay % 1000))
    }

    /// `2026-11-21T20:14:26.123Z`.
    public var iso8601: String {
        var out = [UInt8]()
        out.reserveCapacity(24)
        appendISO8601(to: &out, separator: UInt8(ascii: "T"), zone: true)
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String { iso8601 }

    /// Appends `YYYY-MM-DD<sep>hh:mm:ss.mmm[Z]` as ASCII bytes.
    func appendISO8601(to out: inout [UInt8], separator: UInt8, zone: Bool) {
        let c = components
        func digits(_ value: Int, _ width: Int) {
            var v = value
            var buf: (UInt8, UInt8, UInt8, UInt8) = (48, 48, 48, 48)
            withUnsafeMutableBytes(of: &buf) { p in
                var i = width - 1
                while i >= 0 {
                    p[i] = UInt8(48 + v % 10)
                    v /= 10
                    i -= 1
                }
                for j in 0..<width { out.append(p[j]) }
            }
        }
        digits(max(0, min(c.year, 9999)), 4)
        out.append(UInt8(ascii: "-"))
        digits(c.month, 2)
        out.append(UInt8(ascii: "-"))
        digits(c.day, 2)
        out.append(separator)
        digits(c.hour, 2)
        out.append(UInt8(ascii: ":"))
        digits(c.minute, 2)
        out.append(UInt8(ascii: ":"))
        digits(c.second, 2)
        out.append(UInt8(ascii: "."))
        digits(c.millisecond, 3)
        if zone { out.append(UInt8(ascii: "Z")) }
    }

    /// Parses the ISO 8601 form this type prints (`YYYY-MM-DDThh:mm:ss[.fff]Z`, a space is accepted
    /// for the `T`, fractions beyond milliseconds are truncated). Returns nil for anything else.
    public init?(iso8601 text: String) {
        let b = Array(text.utf8)
        func num(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= b.count else { return nil }
            var v = 0
            for i in from..<(from + count) {
                let d = Int(b[i]) - 48
                guard d >= 0, d <= 9 else { return nil }
                v = v * 10 + d
            }
            return v
        }
        guard b.count >= 20,
            let y = num(0, 4), b[4] == UInt8(ascii: "-"), let mo = num(5, 2), b[7] == UInt8(ascii: "-"),
            let d = num(8, 2), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: " "),
            let h = num(11, 2), b[13] == UInt8(ascii: ":"), let mi = num(14, 2), b[16] == UInt8(ascii: ":"),
            let s = num(17, 2),
            (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, s < 61
        else { return nil }
        var i = 19
        var ms = 0
        if b[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 100
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                ms += Int(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        guard i == b.count - 1, b[i] == UInt8(ascii: "Z") else { return nil }
        // days_from_civil.
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let mp = mo > 2 ? mo - 3 : mo + 9
        let doy = (153 * mp + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = Int64(era * 146_097 + doe - 719_468)
        millisecondsSinceEpoch = days * 86_400_000 + Int64(h * 3_600_000 + mi * 60_000 + s * 1000 + ms)
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let t = EventTime(iso8601: text) else {
            throw DecodingError.dataCorruptedError(
                in: c, debugDescription: "time must be ISO 8601 UTC with milliseconds, got \(text)")
        }
        self = t
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(iso8601)
    }
}
