import Foundation
import Glibc
import Linux
import NameBytes
import Synchronization

/// The file a browser opens to reach `coordfs web`'s page without the token on any command line
/// (docs/web.md, "Opening the page"). A URL given to a browser as an argument (`chromium URL`,
/// `xdg-open URL`) sits in that process's /proc/PID/cmdline, which every local user may read, and
/// with the token anyone has the page of the user who started it. The launcher holds the URL in a
/// redirect instead: an HTML file only this user can read (0600), in a folder made for it only this
/// user can enter (0700, made by mkdtemp(3) in `$XDG_RUNTIME_DIR` when that is this user's own
/// private folder, else in `$TMPDIR` or /tmp), so a browser is given `file:///…` and the token
/// travels only inside the browser. Removed, with its folder, when `coordfs web` ends.
final class WebLauncher: Sendable {
    /// The folder made for the file, and the file.
    let folder: String
    let path: String
    private let removed = Mutex(false)

    /// The file's name in its folder.
    static let fileName = "page.html"

    /// Writes the launcher for `url`; throws a message when no private folder can be made.
    init(url: String) throws {
        let base = Self.base()
        var template: [CChar] = (base + "/coordfs-web-XXXXXX").withNameCString { Array(UnsafeBufferPointer(start: $0, count: strlen($0) + 1)) }
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else {
            throw CLIError("cannot make a private folder in \(base) for the page's launcher: \(String(cString: strerror(errno)))")
        }
        folder = String(nameCString: template)
        path = folder + "/" + Self.fileName
        let fd = path.withNameCString { open($0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else {
            let e = errno
            _ = folder.withNameCString { rmdir($0) }
            throw CLIError("cannot write the page's launcher in \(folder): \(String(cString: strerror(e)))")
        }
        defer { close(fd) }
        // mkdtemp makes the folder 0700 and the file is made 0600 whatever the umask allows more
        // of; fchmod in case a umask took bits from the owner (the browser must read it).
        _ = fchmod(fd, 0o600)
        let bytes = Array(Self.page(url: url).utf8)
        var offset = 0
        while offset < bytes.count {
            let n = retryingEINTR { bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) } }
            guard n > 0 else {
                let e = errno
                remove()
                throw CLIError("cannot write the page's launcher \(path): \(String(cString: strerror(e)))")
            }
            offset += n
        }
    }

    /// Where the launcher's folder is made: `$XDG_RUNTIME_DIR` when it is a folder of this user's
    /// that no one else may enter (as the XDG base directory specification says it is), else
    /// `$TMPDIR` (absolute) or /tmp, where mkdtemp's folder is this user's alone (and the sticky
    /// bit keeps others from renaming it).
    static func base() -> String {
        if let runtime = getenv("XDG_RUNTIME_DIR").map({ String(nameCString: $0) }), runtime.hasPrefix("/") {
            var st = stat()
            if runtime.withNameCString({ lstat($0, &st) }) == 0, (st.st_mode & S_IFMT) == S_IFDIR,
               st.st_uid == geteuid(), st.st_mode & 0o077 == 0 {
                return runtime
            }
        }
        if let tmp = getenv("TMPDIR").map({ String(nameCString: $0) }), tmp.hasPrefix("/") { return tmp }
        return "/tmp"
    }

    /// A page that goes on to `url` at once: a refresh, and a link for a browser that does not
    /// follow one. From a `file:` page no Referer is sent, and the page asks for none either.
    static func page(url: String) -> String {
        // The URL is ours (an address, a port and a hex token): nothing in it needs escaping in
        // HTML; escaped anyway, in case an address ever holds a character that does.
        let shown = url.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        return """
        <!DOCTYPE html>
        <html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
        <meta http-equiv="refresh" content="0;url=\(shown)">
        <title>coordfs web</title></head>
        <body><p><a href="\(shown)" rel="noreferrer">Open the coordfs web page</a></p></body></html>

        """
    }

    /// `file://` and the path, each byte outside the URL's unreserved characters and `/` as %XX.
    var url: String {
        var out = "file://"
        for b in path.nameBytes {
            let c = Character(Unicode.Scalar(b))
            if b < 0x80 && (c.isLetter || c.isNumber || "/-._~".contains(c)) { out.append(c) } else { out += String(format: "%%%02X", b) }
        }
        return out
    }

    /// Removes the file and its folder (once).
    func remove() {
        guard removed.withLock({ done in defer { done = true }; return !done }) else { return }
        _ = path.withNameCString { unlink($0) }
        _ = folder.withNameCString { rmdir($0) }
    }

    deinit { remove() }

    /// Starts the user's browser on the launcher (`--open`): each command of `$BROWSER` (a list
    /// separated by `:`, each a program and its arguments separated by spaces, `%s` standing for
    /// the file's URL, which is appended when no argument holds `%s`) until one starts, else
    /// `xdg-open`. The browser is given the `file:` URL only, never the token; it gets the default
    /// signal dispositions and a process group of its own (Ctrl-C in `coordfs web`'s terminal does
    /// not close it), and is waited for on a thread so it leaves no zombie.
    func openInBrowser() throws {
        let commands = (getenv("BROWSER").map { String(nameCString: $0) } ?? "")
            .split(separator: ":").map { $0.split(separator: " ").map(String.init) }.filter { !$0.isEmpty }
        var tried: [String] = []
        for words in commands.isEmpty ? [["xdg-open"]] : commands {
            var argv = words.map { $0.replacingOccurrences(of: "%s", with: url) }
            if !words.contains(where: { $0.contains("%s") }) { argv.append(url) }
            if let pid = Self.spawn(argv) {
                Thread.detachNewThread {
                    var status: Int32 = 0
                    _ = retryingEINTR { waitpid(pid, &status, 0) }
                }
                return
            }
            tried.append(words[0])
        }
        throw CLIError("cannot start a browser (tried \(tried.joined(separator: ", "))): set BROWSER, or open \(url) in one")
    }

    private static func spawn(_ argv: [String]) -> pid_t? {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t(), all = sigset_t()
        sigemptyset(&empty)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Its chatter stays off coordfs web's stdout (which prints the URLs); its errors are shown.
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        let cargs: [UnsafeMutablePointer<CChar>?] = argv.map { $0.withNameCString { strdup($0) } } + [nil]
        defer { cargs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = argv[0].withNameCString { posix_spawnp(&pid, $0, &actions, &attributes, cargs, environ) }
        return rc == 0 ? pid : nil
    }
}
