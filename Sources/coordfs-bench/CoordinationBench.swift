enum CoordinationBench {
    static func run(_ args: [String]) async throws {
        print("Coordination benchmark: not written yet")
    }
}
