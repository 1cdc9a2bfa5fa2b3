/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the checksum zlib and gzip use, computed
/// slicing-by-8 so checksumming never dominates the writer's batch time.
enum CRC32 {
    private static let tables: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = (c & 1) != 0 ? (0xEDB8_8320 ^ (c >> 1)) : (c >> 1) }
            t[i] = c
        }
        for i in 0..<256 {
            var c = t[i]
            for k in 1..<8 {
                c = t[Int(c & 0xFF)] ^ (c >> 8)
                t[k * 256 + i] = c
            }
        }
        return t
    }()

    /// The CRC-32 of `bytes`.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        tables.withUnsafeBufferPointer { t in
            var i = 0
            let n = bytes.count
            while i + 8 <= n {
                let lo = UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16
                    | UInt32(bytes[i + 3]) << 24
                let a = crc ^ lo
                crc = t[7 * 256 + Int(a & 0xFF)] ^ t[6 * 256 + Int((a >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((a >> 16) & 0xFF)] ^ t[4 * 256 + Int(a >> 24)]
                    ^ t[3 * 256 + Int(bytes[i + 4])] ^ t[2 * 256 + Int(bytes[i + 5])]
                    ^ t[1 * 256 + Int(bytes[i + 6])] ^ t[Int(bytes[i + 7])]
                i += 8
            }
            while i < n {
                crc = t[Int((crc ^ UInt32(bytes[i])) & 0xFF)] ^ (crc >> 8)
                i += 1
            }
        }
        return crc ^ 0xFFFF_FFFF
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
