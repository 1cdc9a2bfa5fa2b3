import ArgumentParser

struct CoordFSCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coordfs",
        abstract: "Coordinated, conflict-safe shared editing of a folder, mounted through FUSE.",
        discussion: """
        coordfs mounts a backing folder and routes every open, write, rename and delete made through the \
        mount through a coordinator with NSFileCoordinator / NSFilePresenter semantics.

        Every command finds a mount from any path inside it, also when its backing folder was \
        renamed or moved while mounted (it says so on stderr, or, to a user who cannot see where the \
        folder went, that it moved; docs/cli.md).
        """,
        version: CoordFSVersion.string,
        subcommands: [
            MountCommand.self, UnmountCommand.self, StatusCommand.self,
            WatchCommand.self, LogCommand.self,
            PresentCommand.self, CoordinateCommand.self,
            VersionsCommand.self, ShowCommand.self, DiffCommand.self, RestoreCommand.self, ConflictsCommand.self, ResolveCommand.self,
            WebCommand.self,
        ]
    )
}

enum CoordFSVersion {
    static let string = "0.1.0"
}
