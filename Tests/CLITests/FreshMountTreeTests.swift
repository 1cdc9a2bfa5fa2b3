// A script that mounts and at once makes a tree from several processes (Python's os.makedirs, with
// and without exist_ok, and mkdir of one name racing in several processes) sees only folders: a
// mkdir that fails with EEXIST is followed by a stat that says folder, on both transports. Once seen
// (EEXIST, then a stat saying it is no folder) right after a mount over io_uring and never again in
// 2,000 rounds (docs/testing.md); a cheap guard, a few rounds each run.
import Foundation
import Glibc
import XCTest

final class FreshMountTreeTests: CLITestCase {
    private static let script = #"""
    import multiprocessing as mp, os, stat, sys
    root = sys.argv[1]
    def work(args):
        wid, mode = args
        errs = []
        if mode == "nested":
            for k in range(3):
                p = os.path.join(root, "a", "b%d" % k, "c", "d%d" % (wid % 2), "e")
                try: os.makedirs(p, exist_ok=True)
                except Exception as e: errs.append("makedirs %s: %r" % (p, e))
                if not os.path.isdir(p): errs.append("not a folder after makedirs: " + p)
        elif mode == "strict":
            p = os.path.join(root, "s", "t", "u")
            try: os.makedirs(p)
            except FileExistsError:
                if not os.path.isdir(p): errs.append("EEXIST and not a folder: " + p)
            except Exception as e: errs.append("makedirs %s: %r" % (p, e))
        else:
            for k in range(4):
                p = os.path.join(root, "r%d" % k)
                try: os.mkdir(p); got = "made"
                except FileExistsError: got = "EEXIST"
                except Exception as e: errs.append("mkdir %s: %r" % (p, e)); continue
                try:
                    if not stat.S_ISDIR(os.stat(p).st_mode): errs.append("%s, then %s is no folder" % (got, p))
                except Exception as e: errs.append("%s, then stat %s: %r" % (got, p, e))
        return errs
    with mp.Pool(9) as pool:
        errs = sum(pool.map(work, [(w, m) for w, m in enumerate(["nested"] * 3 + ["race"] * 3 + ["strict"] * 3)]), [])
    print("\n".join(errs))
    sys.exit(1 if errs else 0)
    """#

    func testATreeMadeFromSeveralProcessesRightAfterMountingIsAllFolders() throws {
        for transport in ["auto", "dev"] {
            for round in 0..<4 {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: backing)) ?? [] where name != ".coordfs" {
                    try? FileManager.default.removeItem(atPath: backing + "/" + name)
                }
                try mount(options: transport == "auto" ? [] : ["transport=dev"])
                let r = run("/usr/bin/python3", ["-c", Self.script, mnt], timeout: 60)
                unmount()
                XCTAssertEqual(r.status, 0, "transport \(transport), round \(round): \(r)")
            }
        }
    }
}
