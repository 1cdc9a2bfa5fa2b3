import ArgumentParser

struct ResolveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "resolve", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs resolve is being written") }
}
