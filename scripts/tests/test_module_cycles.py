"""scripts/module-cycles.py run on tiny crates and C directories made for
each test: a planted cycle fails it (exit 1, the cycle printed), the same
code without the cycle passes (exit 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "module-cycles.py"


def check(*args):
    run = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)
    return run.returncode, run.stdout


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def crate(tmp_path, lib, server):
    return write(tmp_path / "crate", {"src/lib.rs": lib, "src/server.rs": server})


def test_a_module_using_an_item_defined_in_the_root_the_root_composes_is_a_cycle(tmp_path):
    lib = "mod server;\npub fn lock() {}\npub fn start() { server::run(); }\n"
    status, out = check("--rust", str(crate(tmp_path, lib, "use crate::lock;\npub fn run() { lock(); }\n")))
    assert status == 1
    assert "server.rs -> " in out and "lib.rs -> " in out and "src/server.rs" in out


@pytest.mark.parametrize(
    "root_exports, server_uses",
    [
        # A root that only declares and composes its modules is the top.
        ("pub use server::run;\n", "crate::locking::lock"),
        # A module reaching a leaf through the root's re-export does not depend on the root.
        ("pub use locking::lock;\n", "crate::lock"),
    ],
)
def test_a_root_that_declares_re_exports_and_composes_its_modules_is_only_the_top(tmp_path, root_exports, server_uses):
    lib = "mod locking;\nmod server;\n" + root_exports + "pub fn start() { server::run(); }\n"
    root = crate(tmp_path, lib, f"use {server_uses};\npub fn run() {{ lock(); }}\n")
    write(root, {"src/locking.rs": "pub fn lock() {}\n"})
    status, out = check("--rust", str(root))
    assert status == 0, out
    assert "no import cycle" in out


def shim(tmp_path, fd_table):
    header = (
        "#define REAL(fn) (fn)\n"
        "#define FD_ROUTE(fd, HOST) do { if (!surge_fd(fd)) return HOST; } while (0)\n"
        "int surge_fd(int fd);\nint wrapper_close(int fd);\n"
    )
    wrappers = '#include "shim.h"\nint wrapper_close(int fd) { FD_ROUTE(fd, REAL(close)(fd)); return 0; }\n'
    return write(tmp_path / "shim", {"shim.h": header, "wrappers.c": wrappers, "fds.c": fd_table})


def test_two_c_files_calling_each_other_through_a_header_macro_are_a_cycle(tmp_path):
    fd_table = '#include "shim.h"\nint surge_fd(int fd) { return fd > 2 ? wrapper_close(fd) : 0; }\n'
    status, out = check("--c", str(shim(tmp_path, fd_table)))
    assert status == 1
    assert "fds.c -> " in out and "wrappers.c -> " in out


def test_c_calls_going_one_way_and_static_helpers_of_the_same_name_are_no_cycle(tmp_path):
    fd_table = (
        '#include "shim.h"\n'
        "static int wrapper_close(int fd) { return fd; }\n"
        "int surge_fd(int fd) { return wrapper_close(fd) > 2; }\n"
        "int close(int fd) { return fd; }\n"
    )
    # fds.c's close() is not what REAL(close) in wrappers.c names (libc's).
    status, out = check("--c", str(shim(tmp_path, fd_table)))
    assert status == 0, out
