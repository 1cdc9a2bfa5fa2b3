// A W3C WebDriver client for Debian's chromium and chromium-driver (headless): enough to open a
// page, find and click elements, run a script, accept a confirm() and take a screenshot. It
// speaks chromedriver's HTTP API with the fixture's plain HTTP client: nothing from PyPI.
import Foundation
import Glibc
import TestSupport

final class WebDriver {
    let port: UInt16
    let session: String
    private let driver: Child

    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Starts chromedriver (a child of the test case, killed at teardown) and a headless chromium session.
    /// Their temporary folders (chromium's `org.chromium.Chromium.scoped_dir.*`, which a killed
    /// browser leaves) go beside `profile`, in the test's folder, not in /tmp.
    init(test: CLITestCase, profile: String) throws {
        guard access("/usr/bin/chromedriver", X_OK) == 0, access("/usr/bin/chromium", X_OK) == 0 else {
            throw Failure(description: "chromium and chromium-driver are missing: make deps installs them")
        }
        port = UInt16(20000 + Int(getpid() % 20000))
        let tmp = profile + "-tmp"
        mkdir(tmp, 0o700)
        driver = try test.start("/usr/bin/chromedriver", ["--port=\(port)"], environment: ["TMPDIR": tmp])
        let deadline = Date().addingTimeInterval(20)
        while HTTP.request(port: port, "GET", "/status", timeout: 2)?.status != 200 {
            guard Date() < deadline else { throw Failure(description: "chromedriver did not start: \(driver.stderr)") }
            usleep(100_000)
        }
        let caps: [String: Any] = ["capabilities": ["alwaysMatch": [
            "browserName": "chrome",
            "goog:chromeOptions": ["binary": "/usr/bin/chromium",
                                   "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                            "--window-size=1400,1000", "--user-data-dir=\(profile)", "--no-first-run"]],
        ]]]
        let reply = try Self.call(port, "POST", "/session", caps, timeout: 60)
        guard let value = reply["value"] as? [String: Any], let id = value["sessionId"] as? String else {
            throw Failure(description: "no session: \(reply)")
        }
        session = id
    }

    static func call(_ port: UInt16, _ method: String, _ path: String, _ body: [String: Any]? = nil, timeout: Int = 30) throws -> [String: Any] {
        let data = try body.map { try JSONSerialization.data(withJSONObject: $0) } ?? Data()
        guard let r = HTTP.request(port: port, method, path, headers: ["Content-Type": "application/json"], body: Array(data), timeout: timeout) else {
            throw Failure(description: "chromedriver did not answer \(method) \(path)")
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any] ?? [:]
        if r.status != 200 { throw Failure(description: "\(method) \(path): \(r.status) \(r.text.prefix(600))") }
        return object
    }

    @discardableResult
    func call(_ method: String, _ path: String, _ body: [String: Any]? = nil) throws -> Any? {
        try Self.call(port, method, "/session/\(session)" + path, body)["value"]
    }

    func open(_ url: String) throws { try call("POST", "/url", ["url": url]) }

    /// The errors the page's console has had since the last call (chromedriver's browser log,
    /// level SEVERE): a refused policy source, a request answered 404, an uncaught exception.
    func consoleErrors() throws -> [String] {
        let entries = (try call("POST", "/se/log", ["type": "browser"]) as? [[String: Any]]) ?? []
        return entries.filter { ($0["level"] as? String) == "SEVERE" }.map { ($0["message"] as? String) ?? "\($0)" }
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns its value.
    @discardableResult
    func run(_ script: String, _ args: [Any] = []) throws -> Any? {
        try call("POST", "/execute/sync", ["script": script, "args": args])
    }

    /// The element for a CSS selector.
    func element(_ css: String) throws -> String {
        guard let v = try call("POST", "/element", ["using": "css selector", "value": css]) as? [String: Any],
              let id = v.values.first as? String else { throw Failure(description: "no element \(css)") }
        return id
    }

    /// Clicks the element `css` finds. The page renders its tables again as events stream in, so
    /// the element found may be replaced before the click reaches it ("stale element reference",
    /// more often on a loaded machine): then it is found again and clicked, for up to 10 s.
    func click(_ css: String) throws {
        let deadline = Date().addingTimeInterval(10)
        while true {
            do {
                try call("POST", "/element/\(try element(css))/click", [:])
                return
            } catch let failure as Failure where failure.description.contains("stale element reference") && Date() < deadline {
                usleep(50_000)
            }
        }
    }

    func acceptAlert() throws { try call("POST", "/alert/accept", [:]) }

    /// Opens a new tab and returns its handle (the session stays in the current one).
    func newTab() throws -> String {
        guard let v = try call("POST", "/window/new", ["type": "tab"]) as? [String: Any], let handle = v["handle"] as? String else {
            throw Failure(description: "no new tab")
        }
        return handle
    }

    /// The current tab's handle.
    func currentTab() throws -> String { (try call("GET", "/window") as? String) ?? "" }

    func switchTo(tab handle: String) throws { try call("POST", "/window", ["handle": handle]) }

    /// Types `text` into the element (for a file input: the path of the file to load).
    func type(_ css: String, _ text: String) throws { try call("POST", "/element/\(try element(css))/value", ["text": text]) }

    /// Waits until `script` returns true (polling every 25 ms); returns the seconds it took, nil at the timeout.
    func wait(_ script: String, _ args: [Any] = [], timeout: Double = 10) throws -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < timeout {
            if (try run(script, args) as? Bool) == true { return Date().timeIntervalSince(start) }
            usleep(25_000)
        }
        return nil
    }

    /// A PNG of the viewport, written to `path`.
    func screenshot(_ path: String) throws {
        guard let b64 = try call("GET", "/screenshot") as? String, let png = Data(base64Encoded: b64) else {
            throw Failure(description: "no screenshot")
        }
        try png.write(to: URL(fileURLWithPath: path))
    }

    func quit() {
        _ = try? Self.call(port, "DELETE", "/session/\(session)")
        driver.stop()
    }
}

extension CLITestCase {
    /// Starts `coordfs web` on the mount (as nobody when `asNobody`; with at most `descriptors`
    /// open files, soft and hard, when given; with `options` after the mount and `environment`
    /// added to the test's); returns it, its URL and its port. Its launcher file goes to a
    /// folder of the test's (TMPDIR, no XDG_RUNTIME_DIR unless given): the teardown's SIGKILL
    /// leaves it, and the test's folder takes it along.
    func startWeb(asNobody: Bool = false, descriptors: Int? = nil, options: [String] = [],
                  environment: [String: String] = [:]) throws -> (Child, String, UInt16) {
        var command: [String] = [binary, "web", mnt] + options
        if asNobody { command = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + command }
        if let descriptors { command = ["/usr/bin/prlimit", "--nofile=\(descriptors):\(descriptors)", "--"] + command }
        let tmp = root + "/web-tmp"
        mkdir(tmp, 0o1777)
        chmod(tmp, 0o1777)
        let web = try start(command[0], Array(command.dropFirst()),
                            environment: ["XDG_RUNTIME_DIR": "", "TMPDIR": tmp].merging(environment) { $1 })
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let line = web.lines.first(where: { $0.contains("http://127.0.0.1:") }) {
                let url = line.trimmingCharacters(in: .whitespaces)
                let port = url.dropFirst("http://127.0.0.1:".count).prefix { $0.isNumber }
                return (web, url, UInt16(port)!)
            }
            if web.wait(timeout: 0) != nil { break }
            usleep(50_000)
        }
        throw CLIError("coordfs web did not print its URL: \(web.stdout) \(web.stderr)")
    }
}
