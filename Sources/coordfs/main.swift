// The root command is synchronous on purpose: `coordfs mount` forks its daemon, and forking is only
// safe before the Swift runtime has started any thread.
CoordFSCommand.main()
