import ArgumentParser

struct DiffCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "diff", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs diff is being written") }
}
