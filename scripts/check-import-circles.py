#!/usr/bin/env python3
"""Fails when the files of one crate import each other in a circle that is not already known
(issue 39: imports should run one way, checked rather than claimed).

Each crate's file graph is drawn from the paths its production files write: `crate::a::b`,
`super::x`, `self::x` and paths that start with a child module of the file (comments, and so
intra-doc links, left out). A path leads to the
deepest file its module prefix names (`crate::http::state::ApiState` leads to `http/state.rs`).
Module declarations (`mod x;`) are structure, not imports, and count for nothing; test modules
(`#[cfg(test)]`, `tests.rs`, `*_tests.rs`) are left out. A circle is a strongly connected group
of two or more files.

`KNOWN_CIRCLES` lists circles tolerated for now. It is empty: the circles that existed when the
check landed are all broken (docs/design/import-circles.md says how). A circle not in the list
fails the check, and so does a listed circle that is gone, so the list can only shrink. `--self-test`
first shows the check finding planted circles, one of them through a facade's `pub use`. Standard
library only.
"""

import functools
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = (
    "storage", "storage/etcd", "raft", "raft/tls", "node", "node/bin", "node/grpc",
    "node/grpc/proto", "metrics", "cluster/client", "cluster/tools", "cluster/sim",
)

# Each circle as the sorted files (paths under the crate's src/) it joins, by crate.
KNOWN_CIRCLES = {}

PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUPED = re.compile(r"\buse\s+([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)
TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)\s*;")
TEST_BLOCK = re.compile(r"#\[cfg\(test\)\]\s*mod\s+[a-z_0-9]+\s*\{")


def module_of(source, file):
    """The module path of `file` (a list of names), and whether it is a directory's module."""
    parts = list(file.relative_to(source).with_suffix("").parts)
    if parts[-1] in ("lib", "main") and len(parts) == 1:
        return [], True
    if parts[-1] == "mod":
        return parts[:-1], True
    return parts, False


def file_of(source, module):
    """The file that defines `module`, if any."""
    if not module:
        for root in ("lib.rs", "main.rs"):
            if (source / root).is_file():
                return source / root
        return None
    base = source.joinpath(*module)
    for candidate in (base.with_suffix(".rs"), base / "mod.rs"):
        if candidate.is_file():
            return candidate
    return None


def strip_tests(text):
    """The text without its comments (an intra-doc link is no import) and its inline
    `#[cfg(test)] mod x { ... }` blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    while True:
        match = TEST_BLOCK.search(text)
        if not match:
            return text
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        text = text[: match.start()] + text[end:]


def paths_in(text):
    """Every module path the text writes, with `use a::{b, c::d}` groups spread out."""
    found = [match.group(1).split("::") for match in PATH.finditer(text)]
    for prefix, group in GROUPED.findall(text):
        for item in group.split(","):
            item = item.strip().split(" as ")[0].strip()
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*", item):
                found.append(prefix.split("::") + item.split("::"))
    return found


@functools.lru_cache(maxsize=None)
def reexports(file):
    """What `file` re-exports: the name it gives each item and the path it names it by. Cached:
    every path that reaches a facade asks again, and the files do not change during a check."""
    found = {}
    text = file.read_text()
    for path in re.findall(r"^\s*pub(?:\([^)]*\))?\s+use\s+([A-Za-z_][A-Za-z0-9_:]*)\s*;", text, re.M):
        found[path.split("::")[-1]] = path.split("::")
    for prefix, group in re.findall(r"^\s*pub(?:\([^)]*\))?\s+use\s+([A-Za-z_][A-Za-z0-9_:]*)::\{([^}]*)\}\s*;", text, re.M):
        for item in group.split(","):
            item = item.strip()
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item):
                found[item] = prefix.split("::") + [item]
    return found


def resolve(source, module, path, depth=0):
    """The files that the path written in `module` leads to: the file that defines the item, and
    every facade whose `pub use` it passes through on the way (a file that re-exports an item is
    part of the API the importer depends on: `crate::node::MemberBackend` ties the importer to
    `node.rs` as well as to the child file that defines `MemberBackend`)."""
    if path[0] == "crate":
        start, rest = [], path[1:]
    else:
        start, rest = list(module), path
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                start = start[:-1]
            rest = rest[1:]
    for length in range(len(rest), -1, -1):
        target = file_of(source, start + rest[:length])
        if target is None:
            continue
        item = rest[length] if length < len(rest) else None
        forwarded = reexports(target).get(item) if item and depth < 4 else None
        if forwarded is not None:
            target_module, _ = module_of(source, target)
            return [target] + resolve(source, target_module, forwarded + rest[length + 1:], depth + 1)
        return [target]
    return []


def edges(source, file, test_files):
    """The files of the crate that `file` names through its paths."""
    module, is_directory = module_of(source, file)
    text = strip_tests(file.read_text())
    children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)\s*;", text, re.M))
    targets = set()
    candidates = paths_in(text)
    # A grouped use of a child module (`use child::{A, B}`) is spread out by paths_in; one of an
    # outside crate (`use std::{...}`) names no file of this crate and resolves to nothing.
    candidates += [[name] + rest for name, rest in
                   ((m.group(1), m.group(2).split("::")[1:]) for m in
                    re.finditer(r"\b([a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text))
                   if name in children]
    for path in candidates:
        for target in outside_facades(source, module, resolve(source, module, path)):
            # The crate root only declares modules and re-exports: `crate::Store` names the file
            # that defines it, which this simple reading cannot see, so the root is no target.
            root = target.parent == source and target.stem in ("lib", "main")
            if target != file and target not in test_files and not root:
                targets.add(target)
    return targets


def outside_facades(source, module, chain):
    """The files of a resolved chain that tie `module` to another module: the defining file (the
    last), and each facade passed through on the way unless `module` lies inside the facade's own
    module (a child reaching a sibling through its parent's `pub use` stays within one module)."""
    kept = chain[-1:]
    for facade in chain[:-1]:
        facade_module, _ = module_of(source, facade)
        if module[: len(facade_module)] != facade_module:
            kept.insert(0, facade)
    return kept


def test_files_of(source):
    tests = set()
    for file in source.rglob("*.rs"):
        if file.stem == "tests" or file.stem.endswith("_tests"):
            tests.add(file)
        for name in TEST_MODULE.findall(file.read_text()):
            module, _ = module_of(source, file)
            child = file_of(source, module + [name])
            if child is not None:
                tests.add(child)
    return tests


def circles(source):
    """The strongly connected groups of two or more files, each as sorted relative paths."""
    tests = test_files_of(source)
    files = [file for file in sorted(source.rglob("*.rs")) if file not in tests]
    graph = {file: edges(source, file, tests) for file in files}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(tuple(sorted(f.relative_to(source).as_posix() for f in group)))

    sys.setrecursionlimit(10_000)
    for file in files:
        if file not in index:
            visit(file)
    return sorted(found)


def self_test():
    with tempfile.TemporaryDirectory() as scratch:
        source = pathlib.Path(scratch) / "src"
        (source / "http").mkdir(parents=True)
        (source / "lib.rs").write_text("mod http;\nmod store;\n")
        (source / "store.rs").write_text("pub struct Store;\n")
        (source / "http" / "mod.rs").write_text("mod a;\nmod b;\nuse crate::store::Store;\n")
        (source / "http" / "a.rs").write_text("use super::b::B;\npub struct A;\n")
        (source / "http" / "b.rs").write_text("pub struct B;\n")
        if circles(source):
            print(f"check-import-circles: the self-test saw a circle where none is: {circles(source)}",
                  file=sys.stderr)
            return False
        (source / "http" / "b.rs").write_text("use crate::http::a::A;\npub struct B;\n")
        if circles(source) != [("http/a.rs", "http/b.rs")]:
            print(f"check-import-circles: the self-test's planted circle went unseen: {circles(source)}",
                  file=sys.stderr)
            return False
        # A circle through a facade: `check.rs` names `crate::node::Backend`, which `node.rs`
        # re-exports from its child `node/backend.rs`, while `node.rs` names `check.rs`. No two
        # files name each other directly; the modules `node` and `check` do.
        facade = pathlib.Path(scratch) / "facade"
        (facade / "node").mkdir(parents=True)
        (facade / "lib.rs").write_text("mod check;\nmod node;\n")
        (facade / "node" / "backend.rs").write_text("pub struct Backend;\n")
        (facade / "node.rs").write_text("mod backend;\npub use backend::Backend;\nuse crate::check::spawn;\n")
        (facade / "check.rs").write_text("use crate::node::Backend;\npub fn spawn(_: Backend) {}\n")
        if circles(facade) != [("check.rs", "node.rs")]:
            print(f"check-import-circles: the self-test's circle through a facade went unseen: "
                  f"{circles(facade)}", file=sys.stderr)
            return False
        # A child reaching its sibling through its own parent's facade is no circle.
        (facade / "check.rs").write_text("pub fn spawn() {}\n")
        (facade / "node" / "user.rs").write_text("use crate::node::Backend;\npub fn helper(_: Backend) {}\n")
        (facade / "node.rs").write_text("mod backend;\nmod user;\npub use backend::Backend;\nuse user::helper;\n")
        if circles(facade):
            print(f"check-import-circles: the self-test saw a circle inside one module: "
                  f"{circles(facade)}", file=sys.stderr)
            return False
    print("check-import-circles: the self-test found the planted circles")
    return True


def main():
    if "--self-test" in sys.argv[1:] and not self_test():
        return 1
    failed = False
    for crate in CRATES:
        found = set(circles(ROOT / crate / "src"))
        known = set(KNOWN_CIRCLES.get(crate, ()))
        for circle in sorted(found - known):
            print(f"check-import-circles: {crate}: a new circle: {' <-> '.join(circle)}", file=sys.stderr)
            failed = True
        for circle in sorted(known - found):
            print(f"check-import-circles: {crate}: a listed circle is gone, take it out of "
                  f"KNOWN_CIRCLES: {' <-> '.join(circle)}", file=sys.stderr)
            failed = True
    if failed:
        return 1
    count = sum(len(circles) for circles in KNOWN_CIRCLES.values())
    if count == 0:
        print("check-import-circles: no two files of a crate import each other in a circle")
    else:
        print(f"check-import-circles: no new circle; {count} known ones remain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
