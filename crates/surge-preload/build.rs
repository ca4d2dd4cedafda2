//! Builds the C shim, `libsurge_preload.so`, next to the handler this crate's
//! cdylib becomes (target/<profile>/), where the shim looks for it and
//! `surge run` looks for both.

use std::path::{Path, PathBuf};

const SOURCES: [&str; 18] = [
    "state.c",
    "handler.c",
    "streams.c",
    "paths.c",
    "start.c",
    "order.c",
    "cwd.c",
    "posix.c",
    "dirs.c",
    "stdio.c",
    "aio.c",
    "fast.c",
    "meta.c",
    "mpiio.c",
    "temp.c",
    "walk.c",
    "special.c",
    "exec.c",
];

fn main() {
    let shim = Path::new("shim");
    println!("cargo:rerun-if-changed=shim");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is target/<profile>/build/<crate>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).expect("OUT_DIR inside target/<profile>").to_path_buf();
    let built = out_dir.join("libsurge_preload.so");
    let compiler = cc::Build::new().get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args(["-shared", "-fPIC", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11"])
        .args(["-U_FORTIFY_SOURCE", "-fno-builtin", "-fvisibility=default"])
        // The shim's own calls between its entry points (open -> openat, pwrite64 -> pwrite)
        // bind inside it: a profiler preloaded ahead of it (Darshan) sees each call once.
        .arg("-Wl,-Bsymbolic-functions")
        // libc declares some paths nonnull that Linux accepts as NULL (utimensat).
        .args(["-fno-delete-null-pointer-checks", "-Wno-nonnull-compare"])
        .args(SOURCES.iter().map(|s| shim.join(s)))
        .arg("-o")
        .arg(&built)
        .args(["-ldl", "-lpthread"]);
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run the C compiler {cmd:?}: {e}"));
    assert!(status.success(), "building the C shim failed: {cmd:?}");
    std::fs::copy(&built, profile_dir.join("libsurge_preload.so")).expect("copy the shim next to the handler");
}
