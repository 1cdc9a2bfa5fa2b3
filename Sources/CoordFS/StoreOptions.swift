import DocumentStore

/// The document store's `-o` options (docs/document-store.md, "Mount options").
///
/// | option | default | meaning |
/// |---|---|---|
/// | `store=on\|off` | on | off: no snapshots, no change events, no conflicts |
/// | `on_change=reload\|ask` | reload | a presenter without unsaved changes whose document changed: its base moves to the new file (reload), or a conflict is recorded (ask) |
/// | `on_delete=close\|ask` | close | the same for a deletion: its interest ends (close), or a conflict is recorded (ask) |
/// | `keep_versions=N` | 20 | versions kept per document (pinned ones always stay) |
/// | `keep_mb=N` | 4096 | total size of kept versions, in MiB |
/// | `lost_updates=keep\|off\|refuse` | keep | a save over a document changed since the saver read it: kept and recorded as a conflict (keep), not tracked (off), or refused with ECANCELED (refuse) |
public struct StoreOptions: Sendable, Equatable {
    /// Off: the mount runs without a document store.
    public var enabled = true
    /// The guide's default actions for presenters without unsaved changes.
    public var defaultActions = DefaultActions()
    /// How long versions are kept.
    public var retention = Retention()
    /// Saves by processes that read an older version (docs/semantics.md, "Lost updates").
    public var lostUpdates = LostUpdateMode.keep

    public init() {}

    /// The option names, for `coordfs mount --help` and error messages.
    public static let documentation = "document store: store=on|off, on_change=reload|ask, on_delete=close|ask, keep_versions=N (1 to 100000), keep_mb=N (1 to 1099511627776), lost_updates=keep|off|refuse"

    /// Applies one `-o` item if it is a store option. Returns false for names that are not the
    /// store's (the caller goes on with its own), throws for a store option with a bad value.
    ///
    /// `MountOptions.parse` calls it last, before reporting an unknown option.
    public mutating func parse(_ key: String, _ value: String?, item: String) throws(MountError) -> Bool {
        switch (key, value) {
        case ("store", "on"): enabled = true
        case ("store", "off"): enabled = false
        case ("store", _): throw .badOption(item, "expects on or off")
        case ("on_change", "reload"): defaultActions.whenChanged = .reload
        case ("on_change", "ask"): defaultActions.whenChanged = nil
        case ("on_change", _): throw .badOption(item, "expects reload or ask")
        case ("on_delete", "close"): defaultActions.whenDeleted = .close
        case ("on_delete", "ask"): defaultActions.whenDeleted = nil
        case ("on_delete", _): throw .badOption(item, "expects close or ask")
        case ("keep_versions", let v?):
            guard let n = Int(v), (1...100_000).contains(n) else { throw .badOption(item, "expects 1 to 100000 versions") }
            retention.maxVersionsPerDocument = n
        case ("keep_mb", let v?):
            guard let n = Int64(v), n > 0, n <= 1 << 40 else { throw .badOption(item, "expects 1 to \(Int64(1) << 40) MiB") }
            retention.maxTotalBytes = n << 20
        case ("keep_versions", nil), ("keep_mb", nil): throw .badOption(item, "expects a number")
        case ("lost_updates", let v):
            guard let mode = v.flatMap(LostUpdateMode.init(rawValue:)) else { throw .badOption(item, "expects keep, off or refuse") }
            lostUpdates = mode
        default: return false
        }
        return true
    }

    /// Parses whole `-o` lists, keeping only the store's options (for callers that hold the raw
    /// lists, such as tests; the mount itself goes through `MountOptions.parse`).
    public static func parse(_ lists: [String]) throws(MountError) -> StoreOptions {
        var options = StoreOptions()
        for list in lists {
            for raw in list.split(separator: ",", omittingEmptySubsequences: true) {
                let item = String(raw)
                if let eq = item.firstIndex(of: "=") {
                    _ = try options.parse(String(item[..<eq]), String(item[item.index(after: eq)...]), item: item)
                } else {
                    _ = try options.parse(item, nil, item: item)
                }
            }
        }
        return options
    }

    /// The store configuration for a mount: only presented documents cost anything.
    var configuration: StoreConfiguration {
        StoreConfiguration(retention: retention, defaultActions: defaultActions, unpresentedFiles: .never)
    }
}
