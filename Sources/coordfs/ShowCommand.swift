import ArgumentParser

struct ShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs show is being written") }
}
