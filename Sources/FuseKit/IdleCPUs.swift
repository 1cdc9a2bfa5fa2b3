import Linux

/// How this machine's idle CPUs wait. On a virtual machine whose idle driver is cpuidle-haltpoll with
/// its polling off (`guest_halt_poll_ns` 0), an idle CPU halts at once, and waking it (a reply to a
/// caller blocked in a request, a request for a daemon thread asleep) takes an interrupt and an exit
/// to the host, where a polling CPU is told by a flag. Every FUSE round trip that wakes a CPU pays
/// it: measured on such a machine, the metadata workloads ran about twice as fast with the polling
/// at 200000 ns (docs/benchmarks.md, "Idle CPUs that halt at once"). The daemon says so in its log,
/// once, at mount; it changes nothing itself (the setting is the machine's, and polling costs the
/// host CPU time while the guest is idle).
public enum IdleCPUs {
    public static let driverFile = "/sys/devices/system/cpu/cpuidle/current_driver"
    public static let haltPollFile = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"

    /// The daemon log's line for a machine whose idle CPUs halt at once, else nil; from the contents
    /// of `driverFile` and `haltPollFile` (nil: not there).
    public static func note(driver: String?, haltPollNanoseconds: String?) -> String? {
        func word(_ text: String?) -> Substring? {
            guard let words = text?.split(whereSeparator: { $0.isWhitespace }), words.count == 1 else { return nil }
            return words[0]
        }
        guard word(driver) == "haltpoll", word(haltPollNanoseconds) == "0" else { return nil }
        return "coordfs: this machine's idle CPUs halt at once (cpuidle-haltpoll with guest_halt_poll_ns 0: a virtual machine), "
            + "so every request that wakes an idle CPU, the caller's or the daemon's, costs an interrupt and an exit to the host; "
            + "with the guest's halt polling on (as root: echo 200000 > \(haltPollFile); the host then spends CPU time on idle CPUs) "
            + "metadata work through a mount ran about twice as fast (docs/benchmarks.md, \"Idle CPUs that halt at once\")"
    }

    /// `note(driver:haltPollNanoseconds:)` for this machine.
    public static func note() -> String? {
        note(driver: readWholeFile(driverFile), haltPollNanoseconds: readWholeFile(haltPollFile))
    }
}
