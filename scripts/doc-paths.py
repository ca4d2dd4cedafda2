#!/usr/bin/env python3
"""Checks that every repository path and Rust item the docs name exists.

Reads README.md and docs/*.md, finds words that look like paths into the
repository (they start with crates/, docs/, scripts/, mpiio/, tuner/ or
workloads/), and reports those that do not exist, with the file and line
that names them; "overlap.[ch]" stands for overlap.c and overlap.h. A bare file name after a path on the same line (as in
"store.rs, blocksums.rs") is not checked, nor is a build output (a path git
ignores, such as mpiio/build/bench_mpiio), which a clean clone lacks until it
is built.

It also checks the Rust items the docs quote as a path in backquotes, such as
`drain::throttler::TICK` or `Background::stop_and_join`: a path into one of
our modules (it may start with the crate, surge_bbos::policy) must end at an
item that module defines (or a module); a path that starts with a type ours
defines must end at a method, constant, field or variant our code defines.
Paths into other crates (std::, clap::) are not checked. Exit status 1 when
any is missing.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = re.compile(r"(?<![\w./-])((?:crates|docs|scripts|mpiio|tuner|workloads)/[\w./-]*[\w/](?:\.\[\w+\])?)")


def exists(path: str) -> bool:
    """A path, or with ".[ch]" any of its suffixes (overlap.[ch])."""
    stem, _, suffixes = path.partition(".[")
    if not suffixes:
        return (ROOT / path).exists()
    return any((ROOT / f"{stem}.{s}").exists() for s in suffixes.rstrip("]"))


def build_output(path: str) -> bool:
    """True when git ignores the path: it is made by a build, not kept in the tree."""
    return subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", path], check=False).returncode == 0


ITEM_PATH = re.compile(r"`(\w+(?:::\w+)+)(?:\(\))?`")
DEFINES = r"(?:fn|struct|enum|trait|type|const|static|mod|macro_rules!|use .*\b(?:as )?)\s*{}\b"


def rust_sources() -> dict:
    """Every Rust file of the crates, by path, with its text."""
    return {p: p.read_text() for p in sorted((ROOT / "crates").glob("*/src/**/*.rs"))}


def module_files(segments: list) -> list:
    """The files of the module `segments` names in any crate (crate-relative, or from the crate's name)."""
    found = []
    for src in sorted((ROOT / "crates").glob("*/src")):
        crate = src.parent.name.replace("-", "_")
        inner = segments[1:] if segments[0] == crate else segments
        if not inner:
            found.append(src / "lib.rs")
            continue
        module = src.joinpath(*inner)
        found += [f for f in (module.with_suffix(".rs"), module / "mod.rs") if f.exists()]
    return found


def defines(text: str, name: str) -> bool:
    """Whether `text` defines `name`: an item, a re-export, a field or an enum variant."""
    return bool(
        re.search(DEFINES.format(re.escape(name)), text)
        or re.search(rf"^\s*(?:pub(?:\([\w:]+\))?\s+)?{re.escape(name)}\b\s*[:,({{]", text, re.MULTILINE)
    )


def missing_item(path: str, sources: dict) -> bool:
    """True when `path` names an item of ours that the code does not define."""
    segments = path.split("::")
    if module_files(segments):
        return False
    modules = module_files(segments[:-1])
    if modules:
        return not any(defines(sources.get(f) or f.read_text(), segments[-1]) for f in modules)
    owner = segments[-2]
    if not any(re.search(rf"(?:struct|enum|trait|type)\s+{re.escape(owner)}\b", t) for t in sources.values()):
        return False  # not our type: another crate's path
    return not any(defines(t, segments[-1]) for t in sources.values())


def main() -> int:
    if len(sys.argv) > 1:
        print(__doc__.strip())
        return 0
    missing = []
    sources = rust_sources()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for item in ITEM_PATH.findall(line):
                if missing_item(item, sources):
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: `{item}` is not defined in the code")
            for path in PATH.findall(line):
                # Globs and placeholders name patterns, not files.
                if any(c in path for c in "*<>") or exists(path) or build_output(path):
                    continue
                missing.append(f"{doc.relative_to(ROOT)}:{number}: {path} does not exist")
    for m in missing:
        print(m)
    print(f"doc-paths: {len(missing)} missing name(s)" if missing else "doc-paths: every path and item the docs name exists")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
