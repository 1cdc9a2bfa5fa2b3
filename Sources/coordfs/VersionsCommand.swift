import ArgumentParser

struct VersionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "versions", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs versions is being written") }
}
