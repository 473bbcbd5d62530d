#!/usr/bin/env python3
"""Fails when a production source file of the workspace is missing from docs/ARCHITECTURE.md's
code map (issue 39), so the map cannot silently fall behind the code.

A crate's files are looked for in its section ("### `DIR/` (package ...)"). A file is mapped when
that section names it in backticks: by its path from the repository root or from `src/`, by its
file name, or by its module name; a `mod.rs` also by its directory. Its path from the repository
root anywhere in the document counts too. Not production, so not looked for: the crate roots
(`src/lib.rs`, `src/main.rs`), `tests.rs` and `*_tests.rs`, and files whose parent declares them
under `#[cfg(test)]`. Standard library only, so it needs nothing installed.

`--self-test` first shows the check catching a planted fault: in a scratch tree, a file its
crate's section does not name is reported, and naming it clears the report.
"""

import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SECTION = re.compile(r"^### `([^`]+)/` \(package", re.M)
BACKTICKED = re.compile(r"`([^`\s]+)`")


def sections(text):
    """Each crate's directory and the text of its section."""
    found = {}
    for match in SECTION.finditer(text):
        rest = text[match.end():]
        following = re.search(r"^#{1,3} ", rest, re.M)
        found[match.group(1)] = rest[: following.start()] if following else rest
    return found


def test_only(path):
    """Whether the module in `path` is declared under #[cfg(test)] by its parent."""
    name = path.stem
    if name in ("tests",) or name.endswith("_tests"):
        return True
    directory = path.parent
    parents = [directory / "mod.rs", directory.parent / f"{directory.name}.rs", directory / "lib.rs"]
    declaration = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+" + re.escape(name) + r"\s*;")
    return any(parent.is_file() and declaration.search(parent.read_text()) for parent in parents)


def names_for(crate, relative):
    """What a section may call the file at `relative` (a path under the crate's src/)."""
    path = pathlib.PurePosixPath(relative)
    names = {relative, f"src/{relative}", f"{crate}/src/{relative}", path.name, path.stem}
    if path.name == "mod.rs":
        directory = str(path.parent)
        names |= {directory, directory + "/", f"{crate}/src/{directory}/", path.parent.name + "/"}
    return names


def unmapped(root):
    """The production files under `root` that its docs/ARCHITECTURE.md does not map."""
    text = (root / "docs" / "ARCHITECTURE.md").read_text()
    everywhere = set(BACKTICKED.findall(text))
    missing = []
    for crate, section in sections(text).items():
        source = root / crate / "src"
        if not source.is_dir():
            continue
        mentioned = set(BACKTICKED.findall(section))
        for file in sorted(source.rglob("*.rs")):
            relative = file.relative_to(source).as_posix()
            if relative in ("lib.rs", "main.rs") or test_only(file):
                continue
            if f"{crate}/src/{relative}" in everywhere:
                continue
            if not names_for(crate, relative) & mentioned:
                missing.append(f"{crate}/src/{relative}")
    return missing


def self_test():
    """Plants an unmapped file in a scratch tree and checks that it is reported, then not."""
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        (root / "docs").mkdir()
        (root / "store" / "src" / "mvcc").mkdir(parents=True)
        for file in ("lib.rs", "mvcc/mod.rs", "mvcc/apply.rs", "mvcc/planted.rs", "mvcc/tests.rs"):
            (root / "store" / "src" / file).write_text("//! A module.\n")
        document = "### `store/` (package `store`)\n\n- `mvcc/`: the store; `apply.rs` writes.\n"
        (root / "docs" / "ARCHITECTURE.md").write_text(document)
        if unmapped(root) != ["store/src/mvcc/planted.rs"]:
            print(f"check-code-map: the self-test's planted file went unreported: {unmapped(root)}",
                  file=sys.stderr)
            return False
        (root / "docs" / "ARCHITECTURE.md").write_text(document + "- `mvcc/planted.rs`: planted.\n")
        if unmapped(root):
            print(f"check-code-map: the self-test's mapped file was reported: {unmapped(root)}",
                  file=sys.stderr)
            return False
    print("check-code-map: the self-test caught the planted unmapped file")
    return True


def main():
    if "--self-test" in sys.argv[1:] and not self_test():
        return 1
    missing = unmapped(ROOT)
    if missing:
        print("check-code-map: files missing from docs/ARCHITECTURE.md's code map:", file=sys.stderr)
        for path in missing:
            print(f"  {path}", file=sys.stderr)
        return 1
    print("check-code-map: every production file is in docs/ARCHITECTURE.md's code map")
    return 0


if __name__ == "__main__":
    sys.exit(main())
