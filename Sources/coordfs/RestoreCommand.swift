import ArgumentParser

struct RestoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "restore", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs restore is being written") }
}
