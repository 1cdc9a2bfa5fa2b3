import Coordination
import NameBytes
import Testing

@Suite struct ItemPathTests {
    @Test(arguments: [
        ("", [String]()), ("/", []), ("a", ["a"]), ("/a/b", ["a", "b"]), ("a/b/", ["a", "b"]),
        ("a b/ç.txt", ["a b", "ç.txt"]), ("...", ["..."]), (".hidden", [".hidden"]),
    ])
    func parsesValidPaths(text: String, components: [String]) throws {
        #expect(try ItemPath(text).components == components)
    }

    @Test(arguments: [
        ("a//b", ItemPathError.emptyComponent("a//b")), ("//", .emptyComponent("//")),
        ("a/../b", .dotComponent("a/../b")), ("..", .dotComponent("..")), ("./a", .dotComponent("./a")),
        ("a\u{0}b", .nulByte("a\u{0}b")),
    ])
    func rejectsHostilePaths(text: String, error: ItemPathError) {
        #expect(throws: error) { try ItemPath(text) }
    }

    @Test func rejectsBadComponents() throws {
        #expect(throws: ItemPathError.slashInComponent("a/b")) { try ItemPath(components: ["a/b"]) }
        #expect(throws: ItemPathError.dotComponent("..")) { try ItemPath.root.appending("..") }
        #expect(throws: ItemPathError.emptyComponent("")) { try ItemPath(components: ["x", ""]) }
        // A component appended (every open's path) is checked as the whole path's are.
        let a = path("a")
        #expect(throws: ItemPathError.slashInComponent("b/c")) { try a.appending("b/c") }
        #expect(throws: ItemPathError.dotComponent(".")) { try a.appending(".") }
        #expect(throws: ItemPathError.emptyComponent("")) { try a.appending("") }
        #expect(throws: ItemPathError.nulByte("b\u{0}")) { try a.appending("b\u{0}") }
        let long = String(repeating: "x", count: 300), odd = String(nameBytes: [0x62, 0xFF])
        #expect(try a.appending(long).components == ["a", long])
        #expect(try a.appending(odd).components == ["a", odd])
        #expect(try a.appending("...").components == ["a", "..."])
        #expect(a.components == ["a"], "the path appended to is left as it was")
    }

    @Test func relations() throws {
        let a = path("a"), ab = path("a/b"), abc = path("a/b/c"), ax = path("ax")
        #expect(ItemPath.root.isAncestor(of: a))
        #expect(a.isAncestor(of: abc))
        #expect(!a.isAncestor(of: a))
        #expect(a.isSameOrAncestor(of: a))
        #expect(!a.isAncestor(of: ax))
        #expect(abc.parent == ab)
        #expect(ItemPath.root.parent == nil)
        #expect(try ab.appending("c") == abc)
        #expect(a.appending(path("b/c")) == abc)
        #expect(abc.replacingPrefix(a, with: path("z/y")) == path("z/y/b/c"))
        #expect(abc.replacingPrefix(ab, with: .root) == path("c"))
        #expect(ax.replacingPrefix(a, with: path("q")) == nil)
        #expect(abc.string == "a/b/c")
        #expect(ItemPath.root.description == "/")
        #expect(abc.name == "c")
    }
}
