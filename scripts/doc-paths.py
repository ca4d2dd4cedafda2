#!/usr/bin/env python3
"""Checks that every repository path the docs name exists.

Reads README.md and docs/*.md, finds words that look like paths into the
repository (they start with crates/, docs/, scripts/, mpiio/, tuner/ or
workloads/), and reports those that do not exist, with the file and line
that names them; "overlap.[ch]" stands for overlap.c and overlap.h. A bare file name after a path on the same line (as in
"store.rs, blocksums.rs") is not checked, nor is a build output (a path git
ignores, such as mpiio/build/bench_mpiio), which a clean clone lacks until it
is built. Exit status 1 when any is missing.
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


def main() -> int:
    if len(sys.argv) > 1:
        print(__doc__.strip())
        return 0
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for path in PATH.findall(line):
                # Globs and placeholders name patterns, not files.
                if any(c in path for c in "*<>") or exists(path) or build_output(path):
                    continue
                missing.append(f"{doc.relative_to(ROOT)}:{number}: {path} does not exist")
    for m in missing:
        print(m)
    print(f"doc-paths: {len(missing)} missing path(s)" if missing else "doc-paths: every path the docs name exists")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
