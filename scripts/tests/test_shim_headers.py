"""The list of wrapped calls each C file of the interposer's shim opens
with (`Wraps: a, b, c.`) against docs/interposer.md ("The calls each file
of the shim wraps"), against the functions the file defines, and against
the symbols the built libsurge_preload.so exports."""

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "crates/surge-preload/shim"
DOC = ROOT / "docs/interposer.md"

_spec = importlib.util.spec_from_file_location("module_cycles", ROOT / "scripts/module-cycles.py")
module_cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module_cycles)


def listed(text):
    """The names of a `a, b, c.` list (`none.`: no name)."""
    names = [n for n in re.split(r"[\s,*.]+", text) if n]
    return [] if names == ["none"] else names


def header_lists():
    lists = {}
    for f in sorted(SHIM.glob("*.c")):
        opening = f.read_text().split("*/", 1)[0]
        found = re.search(r"Wraps:(.*)", opening, flags=re.DOTALL)
        assert found, f"{f.name} opens without a `Wraps:` list of the calls it wraps (write `Wraps: none.` if it wraps none)"
        lists[f.name] = listed(found.group(1))
    return lists


def doc_lists():
    section = DOC.read_text().split("### The calls each file of the shim wraps", 1)[1].split("\n#", 1)[0]
    return {m.group(1): listed(m.group(2)) for m in re.finditer(r"(?m)^- `shim/(\w+\.c)`: (.*)$", section)}


def test_every_shim_file_lists_the_same_wrapped_calls_in_its_header_and_in_the_doc():
    headers, doc = header_lists(), doc_lists()
    assert sorted(doc) == sorted(headers), "docs/interposer.md lists another set of shim files than shim/*.c"
    for name, calls in headers.items():
        assert doc[name] == calls, f"{name}: its header lists {calls}, docs/interposer.md {doc[name]}"


def test_every_function_a_shim_file_defines_in_place_of_libc_is_in_its_header():
    for name, calls in header_lists().items():
        text = module_cycles.strip_c((SHIM / name).read_text())
        defined = {n for n, static in module_cycles.c_functions(text).items() if not static and not n.startswith("surge_")}
        assert defined <= set(calls), f"{name} defines {sorted(defined - set(calls))} without listing them in its `Wraps:`"


def built_shim():
    built = [p for p in (ROOT / "target/debug/libsurge_preload.so", ROOT / "target/release/libsurge_preload.so") if p.exists()]
    return max(built, key=lambda p: p.stat().st_mtime) if built else None


def test_the_built_shim_exports_exactly_the_calls_the_headers_list():
    shim = built_shim()
    if shim is None:
        pytest.skip("no libsurge_preload.so under target/: build it with `cargo build -p surge-preload`")
    if any(f.stat().st_mtime > shim.stat().st_mtime for f in SHIM.iterdir()):
        pytest.skip(f"{shim} is older than shim/: rebuild it with `cargo build -p surge-preload`")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(shim)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines()} - {"_init", "_fini"}
    exported = {n for n in exported if not n.startswith("surge_")}
    headers = {n for calls in header_lists().values() for n in calls}
    assert exported == headers, f"exported, not listed: {sorted(exported - headers)}; listed, not exported: {sorted(headers - exported)}"
