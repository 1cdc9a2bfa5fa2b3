import ArgumentParser

struct PresentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "present", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs present is being written") }
}
