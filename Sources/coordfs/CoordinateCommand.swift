import ArgumentParser

struct CoordinateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "coordinate", abstract: "(being written)")
    func run() throws { throw CLIError("coordfs coordinate is being written") }
}
