import ArgumentParser

struct LogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "log", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs log is being written") }
}
