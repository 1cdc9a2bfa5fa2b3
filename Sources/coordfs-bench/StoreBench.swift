enum StoreBench {
    static func run(_ args: [String]) async throws {
        print("store benchmark: being written")
    }
}
