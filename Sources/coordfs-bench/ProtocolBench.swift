enum ProtocolBench {
    static func run(_ args: [String]) async throws {
        print("Protocol benchmark: not written yet")
    }
}
