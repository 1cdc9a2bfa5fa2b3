import Glibc

/// Names of temporary, swap, lock and backup files that editors and tools make beside a document.
/// They are never reported to presenters as documents of their own (no "subitem appeared" for
/// `.file.swp`), and renaming a document to one of them is the first half of a save.
public struct TempNamePatterns: Sendable, Equatable {
    /// Shell globs (fnmatch), matched against the last path component.
    public var patterns: [String]

    public static let defaults: [String] = [
        "*.swp", "*.swo", "*.swx", ".*.sw?",   // vim swap files
        "*~", "4913",                           // vim/emacs backups; vim's write test
        "#*#", ".#*",                           // emacs auto-save and lock
        ".~lock.*#",                            // LibreOffice lock
        "lu*.tmp", "*.tmp",                     // LibreOffice and generic temp files
        "sed??????",                            // sed -i
        ".*.??????",                            // rsync's .name.XXXXXX
        ".goutputstream-*",                     // GLib (gedit, GNOME apps)
        "*.part", "*.crdownload",
    ]

    public init(_ patterns: [String] = TempNamePatterns.defaults) { self.patterns = patterns }

    public func matches(_ name: String) -> Bool {
        for p in patterns where fnmatch(p, name, 0) == 0 { return true }
        return false
    }
}
