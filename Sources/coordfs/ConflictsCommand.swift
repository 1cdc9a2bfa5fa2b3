import ArgumentParser

struct ConflictsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "conflicts", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs conflicts is being written") }
}
