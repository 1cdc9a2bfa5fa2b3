import Glibc

/// Decides, before each wait of a reader (`DeviceReader`, on /dev/fuse or on a ring queue), whether
/// it polls for its `spin` or blocks at once: spinning only pays while a request comes within the
/// spin and a core is free to spin on.
///
/// Two signals, both cheap:
///   - the reader's own catch rate: over each `window` waits that found nothing queued, how many
///     requests came within `cap` of the wait's start (whether the reader spun or slept: a sleeping
///     reader learns what a spin would have caught, so no probing spin is needed to resume). Spinning
///     stops when fewer than half came in time, and resumes when at least three quarters did;
///   - whether a core is idle: the number of runnable tasks of the whole machine (/proc/loadavg's
///     fourth field, read with one pread(2): 5 µs measured at load 10, up to 24 µs of wall time at load
///     25, at most every `sampleInterval`). More than
///     the online CPUs means someone waits for a core the spin would take (the tool whose next request
///     the spin waits for, often). It is "crowded" while at least half of the last 8 samples said so;
///     a crowded machine gets no spin whatever the catch rate.
/// With a CPU-bound process on every core, a spinning reader keeps the core the tool needs for its
/// next call: each request then waited out the spin (tar 8.6-13.4 s against 3.2 s with `spin=0`).
///
/// Only the thread that holds the reader calls it (the holder changes through the reader's semaphore,
/// which orders the accesses), so it is a plain value. Times are nanoseconds of CLOCK_MONOTONIC;
/// `now` and `runnable` are parameters so the tests drive it with a fake clock and signal.
struct SpinGovernor {
    /// The spin asked for (`-o spin`): the most a wait polls. 0: never.
    let cap: Int
    /// Online CPUs: more runnable tasks than this and no core is idle.
    let cpus: Int
    /// False: every wait polls for `cap` (`-o spin_adapt=off`).
    let adaptive: Bool
    /// Waits per catch-rate decision.
    static let window = 16
    /// The run queue is read at most this often.
    static let sampleInterval = 4_000_000

    /// The catch rate said spinning pays (the last decision).
    private(set) var catching = true
    private var waits = 0
    private var caught = 0
    private var lastSample = Int.min
    /// The last 8 samples, newest in bit 0: 1 = more runnable tasks than CPUs.
    private var samples: UInt8 = 0
    /// Runnable-task samples taken (tests, the signal's cost).
    private(set) var sampled = 0

    init(cap: Int, cpus: Int, adaptive: Bool = true) {
        self.cap = max(0, cap)
        self.cpus = max(1, cpus)
        self.adaptive = adaptive
    }

    /// No core was idle in at least half of the recent samples.
    var crowded: Bool { samples.nonzeroBitCount >= 4 }

    /// How long the wait starting at `now` polls before it blocks (0: block at once). `runnable`:
    /// the machine's runnable tasks now (nil: unknown), called at most every `sampleInterval`.
    mutating func budget(now: Int, runnable: () -> Int?) -> Int {
        guard cap > 0, adaptive else { return cap }
        if now &- lastSample >= Self.sampleInterval || lastSample == Int.min {
            lastSample = now
            if let r = runnable() {
                sampled &+= 1
                samples = samples << 1 | (r > cpus ? 1 : 0)
            }
        }
        return catching && !crowded ? cap : 0
    }

    /// A request came `waited` after the start of a wait that found the device empty.
    mutating func record(waited: Int) {
        guard cap > 0, adaptive else { return }
        waits += 1
        if waited <= cap { caught += 1 }
        guard waits >= Self.window else { return }
        if catching {
            if caught * 2 < waits { catching = false }
        } else if caught * 4 >= waits * 3 {
            catching = true
        }
        waits = 0
        caught = 0
    }
}

/// The machine's runnable tasks now: the numerator of /proc/loadavg's fourth field ("3/250"), which
/// the kernel counts at each read. One descriptor for the process, read with pread(2) (a single
/// system call). Nil when it cannot be read (then only the catch rate decides).
enum RunQueue {
    private static let fd: Int32 = open("/proc/loadavg", O_RDONLY | O_CLOEXEC)

    static let onlineCPUs: Int = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

    static func runnable() -> Int? {
        guard fd >= 0 else { return nil }
        var buffer: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &buffer) { raw -> Int? in
            let n = pread(fd, raw.baseAddress, raw.count, 0)
            guard n > 0 else { return nil }
            return parse(UnsafeRawBufferPointer(rebasing: raw[..<n]))
        }
    }

    /// The runnable count out of /proc/loadavg's text ("0.52 0.58 0.59 3/250 12345").
    static func parse(_ text: UnsafeRawBufferPointer) -> Int? {
        var fields = 0, i = 0
        while i < text.count && fields < 3 {
            if text[i] == UInt8(ascii: " ") { fields += 1 }
            i += 1
        }
        var value = 0, digits = 0
        while i < text.count, text[i] >= UInt8(ascii: "0"), text[i] <= UInt8(ascii: "9") {
            value = value * 10 + Int(text[i] - UInt8(ascii: "0"))
            digits += 1
            i += 1
        }
        return digits > 0 && i < text.count && text[i] == UInt8(ascii: "/") ? value : nil
    }
}
