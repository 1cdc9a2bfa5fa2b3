import ArgumentParser

struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "watch", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs watch is being written") }
}
