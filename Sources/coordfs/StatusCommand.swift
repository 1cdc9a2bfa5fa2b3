import ArgumentParser

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs status is being written") }
}
