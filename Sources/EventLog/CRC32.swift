import LinuxGNU

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the checksum zlib and gzip use: whole
/// 16-byte blocks folded by the CPU's carry-less multiplication where it has PCLMULQDQ
/// (`LinuxGNU.CarrylessCRC32`), the rest (and everything on a CPU without it) slicing-by-8.
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

    /// Whether the checksum is folded by the CPU (PCLMULQDQ) for 16 bytes and more.
    static let usesCarrylessMultiply = CarrylessCRC32.available

    /// The CRC-32 of `bytes`.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        var i = 0
        let n = bytes.count
        // Whole 16-byte blocks by carry-less multiplication where the CPU has it (a few
        // instructions a block instead of two table rounds), the rest through the tables; the same
        // checksum either way.
        if n >= 16 && usesCarrylessMultiply {
            crc = CarrylessCRC32.fold16(bytes.baseAddress!, count: n, crc: crc)
            i = n & ~15
        }
        tables.withUnsafeBufferPointer { t in
            while i + 8 <= n {
                // One 8-byte load; the low half goes through the CRC, the high half only through the tables.
                let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                let a = crc ^ UInt32(truncatingIfNeeded: word)
                let b = UInt32(truncatingIfNeeded: word >> 32)
                crc = t[7 * 256 + Int(a & 0xFF)] ^ t[6 * 256 + Int((a >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((a >> 16) & 0xFF)] ^ t[4 * 256 + Int(a >> 24)]
                    ^ t[3 * 256 + Int(b & 0xFF)] ^ t[2 * 256 + Int((b >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((b >> 16) & 0xFF)] ^ t[Int(b >> 24)]
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
