enum EventLogBench {
    static func run(_ args: [String]) async throws {
        print("EventLog benchmark: not written yet")
    }
}
