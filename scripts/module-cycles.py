#!/usr/bin/env python3
"""Reports import cycles between the files of a Rust crate, and between the
files of a C directory that use each other's global variables.

Rust: every file under <crate>/src is a module (lib.rs/main.rs the root,
a/mod.rs or a.rs the module `a`, a/b.rs `a::b`). A file depends on another
when it names an item of it: a `crate::`, `super::`, `self::` or
child-module path, in a `use` line (groups `{..}` expanded) or in code.
A path through a module's `pub use` re-export counts for the file that
defines the item, so `use crate::Client` leads to client.rs, not lib.rs.
Inline modules belong to their file; a `#[cfg(test)]` one is left out (it
is not part of the built crate, and a unit test may use any module).

The crate root (lib.rs, or main.rs alone) is a node like any other: it
depends on the modules whose items it names in its code (composing them;
`mod x;` and its own `pub use x::..` re-exports do not count), and a module
that names an item *defined* in the root depends on the root. A root that
only declares, re-exports and composes is the top of the crate; one that
also holds what its modules use is both top and bottom, a cycle.

C: a file depends on another when it uses a global variable (file scope,
not static, not extern) that the other defines, or calls (or takes the
address of) a function, not static, that the other defines; calls made
through the directory's header macros and static inline functions count
for the file that uses them. `REAL(fn)` names libc's `fn`, not the shim's.

Any cycle (two or more files that reach each other) is printed and the
exit status is 1. Usage: module-cycles.py [--rust CRATE_DIR]... [--c DIR]...
With no arguments it checks every crate under crates/ and the preload shim.
"""

import argparse
import re
import sys
from pathlib import Path

# ---------------------------------------------------------------- Rust


def strip_rust(text):
    """The text with comments, string and char literals blanked (so braces
    and paths inside them do not count); newlines are kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_test_modules(text):
    """The text with each `#[cfg(test)] mod x { ... }` blanked (newlines kept)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
        if not m:
            return text
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), i) + text[i:]


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (`as x` and `*` dropped)."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        tree = re.sub(r"\s+as\s+\w+$", "", tree)
        parts = [p.strip() for p in tree.split("::") if p.strip() and p.strip() != "*"]
        return [parts] if parts else []
    prefix = [p.strip() for p in tree[:brace].split("::") if p.strip()]
    inner = tree[brace + 1:tree.rindex("}")]
    items, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    paths = []
    for item in items:
        if item.strip() == "self":
            paths.append(prefix)
        elif item.strip():
            paths += [prefix + p for p in expand_use_tree(item)]
    return paths


class RustCrate:
    def __init__(self, crate_dir):
        self.src = Path(crate_dir) / "src"
        self.files = {}  # module path (tuple) -> file
        for f in sorted(self.src.rglob("*.rs")):
            rel = f.relative_to(self.src).with_suffix("").parts
            if rel in (("lib",), ("main",)):
                mod = ()
            elif rel[-1] == "mod":
                mod = rel[:-1]
            else:
                mod = rel
            if mod == () and () in self.files:
                continue  # a crate with both lib.rs and main.rs: the lib is the root
            self.files[mod] = f
        self.text = {m: without_test_modules(strip_rust(f.read_text())) for m, f in self.files.items()}
        self.reexports = {m: self._reexports(m) for m in self.files}

    def _uses(self, mod):
        """(inline module path, use-tree, is pub) for each `use` of a file."""
        text = self.text[mod]
        for m in re.finditer(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
            yield self._inline_at(mod, m.start()), m.group(2), bool(m.group(1))

    def _inline_at(self, mod, pos):
        """The module path at `pos` of file `mod`, inside any inline `mod x {`."""
        text = self.text[mod]
        stack, depth = [], 0
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{|\{|\}", text[:pos]):
            if m.group(1):
                depth += 1
                stack.append((m.group(1), depth))
            elif m.group(0) == "{":
                depth += 1
            else:
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1
        return mod + tuple(name for name, _ in stack)

    def _reexports(self, mod):
        names = {}
        for at, tree, public in self._uses(mod):
            if public:
                for path in expand_use_tree(tree):
                    names[path[-1]] = (at, path)
        return names

    def absolute(self, at, path):
        """`path` named in module `at` as a path from the crate root, or None
        for a path into another crate."""
        if not path:
            return None
        head, rest = path[0], list(path[1:])
        if head == "crate":
            return rest
        if head in ("self", "super"):
            base = list(at)
            while path and path[0] in ("self", "super"):
                if path[0] == "super":
                    base = base[:-1]
                path = path[1:]
            return base + list(path)
        if at + (head,) in self.files or any(k[:len(at) + 1] == at + (head,) for k in self.files):
            return list(at) + list(path)
        return None

    def home(self, path, seen=0):
        """The file module that defines the item at crate path `path`."""
        mod = ()
        for i, seg in enumerate(path):
            if mod + (seg,) in self.files:
                mod = mod + (seg,)
                continue
            reexport = self.reexports.get(mod, {}).get(seg)
            if reexport and seen < 8:
                at, target = reexport
                full = self.absolute(at, target)
                if full is not None:
                    return self.home(full + list(path[i + 1:]), seen + 1)
            break
        return mod

    def edges(self):
        graph = {m: set() for m in self.files}
        for mod, text in self.text.items():
            named = []
            for at, tree, _public in self._uses(mod):
                named += [(at, p) for p in expand_use_tree(tree)]
            # Paths in code: crate::a::b, super::x, self::x, child::x (a
            # child module's head is resolved by `absolute`, others dropped).
            for m in re.finditer(r"(?<![\w:])([a-z_]\w*(?:::\w+)+)", text):
                named.append((self._inline_at(mod, m.start()), m.group(1).split("::")))
            for at, path in named:
                full = self.absolute(at, path)
                if full is None:
                    continue
                target = self.home(full)
                # A module naming its own children (`pub use child::X`, `mod`) is structure, not a dependency back.
                if target != mod and not (target[:len(mod)] == mod and self._is_reexport_of(mod, full)):
                    graph[mod].add(target)
        return {self.files[m]: {self.files[t] for t in ts} for m, ts in graph.items()}

    def _is_reexport_of(self, mod, full):
        return any(self.absolute(at, p) == full for at, p in self.reexports[mod].values())


# ---------------------------------------------------------------- C


def strip_c(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\])*'", "' '", text)
    # A directive runs on over its lines ending in a backslash.
    return re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text)


def c_globals(text):
    """Variables a C file defines at file scope, not static and not extern."""
    names, depth, statement = set(), 0, ""
    for c in text:
        if c == "{":
            depth += 1
            statement = ""
        elif c == "}":
            depth -= 1
            statement = ""
        elif depth == 0:
            if c == ";":
                decl = statement.strip()
                words = decl.split()
                if words and "static" not in words and "extern" not in words and "typedef" not in words and "(" not in decl.split("=")[0]:
                    m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*(=.*)?$", decl, flags=re.DOTALL)
                    if m and len(words) > 1:
                        names.add(m.group(1))
                statement = ""
            else:
                statement += c
    return names


C_KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "do", "else"}


def c_functions(text):
    """{name: is static} for the functions a C file defines at file scope."""
    found, depth, statement = {}, 0, ""
    for c in text:
        if c == "{":
            m = re.search(r"(\w+)\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*$", statement)
            if depth == 0 and m and m.group(1) not in C_KEYWORDS and "=" not in statement and not re.match(r"\s*typedef\b", statement):
                found[m.group(1)] = "static" in statement.split()
            depth += 1
            statement = ""
        elif c == "}":
            depth -= 1
            statement = ""
        elif c == ";":
            statement = ""
        elif depth == 0:
            statement += c
    return found


def inside_braces(text):
    """The text within braces (function bodies, initializers), where calls are."""
    out, depth = [], 0
    for c in text:
        depth += c == "{"
        if depth:
            out.append(c)
        depth -= c == "}"
    return "".join(out)


CALL = r"\b(?!(?:if|while|for|switch|return|sizeof)\b)(\w+)\s*\("


def header_expansions(directory):
    """{name: functions called} for each macro and static inline function of
    the directory's headers: a .c file using the name makes those calls too."""
    expansions = {}
    for header in sorted(Path(directory).glob("*.h")):
        raw = re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S)
        for m in re.finditer(r"(?m)^\s*#\s*define\s+(\w+)((?:.*\\\n)*.*)", raw):
            expansions[m.group(1)] = set(re.findall(CALL, m.group(2)))
        text = strip_c(raw)
        for name, static in c_functions(text).items():
            body = re.search(r"\b" + name + r"\s*\([^;{}]*\)\s*\{", text)
            if static and body:
                expansions[name] = set(re.findall(CALL, inside_braces(text[body.end() - 1:]).split("}")[0]))
    return expansions


def c_calls(text, expansions):
    """Functions a C file's bodies call or name (`&fn`), also through the
    header macros and inline functions they use. `REAL(fn)` is libc's `fn`."""
    body = re.sub(r"\bREAL\s*\(\s*\w+\s*\)", "", inside_braces(text))
    names = set(re.findall(CALL, body)) | set(re.findall(r"&\s*(\w+)", body))
    used = {w for w in re.findall(r"\b\w+\b", body) if w in expansions}
    todo = list(used)
    while todo:
        for w in expansions[todo.pop()] - names:
            names.add(w)
            if w in expansions:
                todo.append(w)
    return names


def c_edges(directory):
    files = sorted(Path(directory).glob("*.c"))
    text = {f: strip_c(f.read_text()) for f in files}
    expansions = header_expansions(directory)
    variables = {f: c_globals(t) for f, t in text.items()}
    functions = {f: {n for n, static in c_functions(t).items() if not static} for f, t in text.items()}
    graph = {f: set() for f in files}
    for f, t in text.items():
        words = set(re.findall(r"\b\w+\b", t))
        calls = c_calls(t, expansions) - set(c_functions(t))  # its own (static) ones are called here
        for other in files:
            if other != f and (words & variables[other] or calls & functions[other]):
                graph[f].add(other)
    return graph


# ---------------------------------------------------------------- cycles


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def shown(path):
    try:
        return Path(path).resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def report(name, graph):
    bad = cycles(graph)
    graph = {shown(f): {shown(t) for t in ts} for f, ts in graph.items()}
    bad = [sorted(shown(f) for f in c) for c in bad]
    for component in bad:
        members = set(component)
        print(f"{shown(name)}: import cycle between {', '.join(str(f) for f in component)}")
        for f in component:
            for t in sorted(graph[f] & members):
                print(f"    {f} -> {t}")
    return not bad


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rust", action="append", default=[], metavar="CRATE_DIR", help="a Rust crate to check")
    parser.add_argument("--c", action="append", default=[], metavar="DIR", help="a directory of C files to check")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    if not args.rust and not args.c:
        args.rust = sorted(str(p.parent) for p in (root / "crates").glob("*/Cargo.toml"))
        args.c = [str(root / "crates/surge-preload/shim")]
    ok = True
    for crate in args.rust:
        ok &= report(crate, RustCrate(crate).edges())
    for directory in args.c:
        ok &= report(directory, c_edges(directory))
    if ok:
        print(f"module-cycles: no import cycle in {len(args.rust)} crates and {len(args.c)} C directories")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
