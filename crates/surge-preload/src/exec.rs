//! Programs stored in Surge, run with the interposer alone: the kernel's
//! exec cannot open a Surge path (nothing is mounted there), so the shim
//! asks here for the program. A `#!` script is run by its interpreter with
//! the script's path (the interpreter reads it through the interposer, as
//! any file); a binary is copied into a sealed memfd that the shim executes
//! with execveat (fexecve), keeping argv and the environment.

use crate::process::process;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use surge_client::{Client, Error, File, Result};

/// What the shim is told for a script (its SURGE_SCRIPT).
pub const SCRIPT: i32 = -2;
/// The longest `#!` line the kernel reads (BINPRM_BUF_SIZE).
pub const SCRIPT_LINE_MAX: usize = 256;
/// Bytes copied into the memfd at a time.
const CHUNK: usize = 1 << 20;

pub enum Program {
    /// A sealed memfd holding the program's bytes, close-on-exec.
    Image(OwnedFd),
    /// A script: what follows its `#!`, up to the end of the line.
    Script(String),
}

/// Opens Surge path `path` with `client` if it may be executed, as the
/// kernel decides: a directory or a file without an execute bit is refused.
fn executable(client: &Client, path: &str) -> Result<File> {
    let file = client.open(path, libc::O_RDONLY, 0)?;
    let mode = match file.buffer_file() {
        Some(buffer_file) => buffer_file.mode,
        None => file.attr()?.mode,
    };
    if file.is_dir() || mode & 0o111 == 0 {
        return Err(Error::new(libc::EACCES, format!("{path} is not an executable file")));
    }
    Ok(file)
}

/// Whether Surge path `path` may be executed, asked from a vfork child: it
/// shares its parent's memory and connections (which it may have closed in
/// its own descriptor table), so it asks daemon 0 through a client of its
/// own, dropped before it returns; the program itself is then run by a
/// program image of its own (the shim's exec_from_vfork_child).
pub fn probe(path: &str) -> Result<()> {
    let client = Client::connect(&surge_cluster::default_path())?;
    let file = executable(&client, path)?;
    // What the kernel runs: an ELF binary or a `#!` script; else ENOEXEC
    // (execvp and shells then run it with /bin/sh, Python's subprocess
    // reports it). Four bytes lie in the first stripe: one daemon answers.
    let mut magic = [0u8; 4];
    let n = file.read_at(&mut magic, 0)?;
    if magic[..n].starts_with(b"#!") || magic[..n] == *b"\x7fELF" {
        return Ok(());
    }
    Err(Error::new(libc::ENOEXEC, format!("{path} is neither an ELF program nor a #! script")))
}

/// The program at Surge path `path`, if it may be executed.
pub fn program(path: &str) -> Result<Program> {
    let file = executable(process().client()?, path)?;
    let mut head = vec![0u8; SCRIPT_LINE_MAX];
    let n = file.read_at(&mut head, 0)?;
    head.truncate(n);
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
        return Ok(Program::Script(String::from_utf8_lossy(line).into_owned()));
    }
    let name = c"surge-exec";
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Error::new(
            libc::ENOMEM,
            format!("cannot copy {path} to run it: {}", std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: a descriptor just made and owned here.
    let image = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut out = std::fs::File::from(image);
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| Error::new(libc::ENOMEM, format!("cannot copy {path} to run it: {e}")))?;
        offset += n as u64;
    }
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS has no memory arguments.
    if unsafe { libc::fcntl(out.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(Error::new(
            libc::EIO,
            format!("cannot seal the copy of {path}: {}", std::io::Error::last_os_error()),
        ));
    }
    Ok(Program::Image(out.into()))
}

/// A `#!` line's interpreter and its one optional argument, as the kernel
/// splits it: the interpreter up to the first blank, the rest (trimmed) as
/// a single argument.
pub fn interpreter(line: &str) -> Option<(&str, Option<&str>)> {
    let line = line.trim_matches([' ', '\t', '\r']);
    if line.is_empty() {
        return None;
    }
    Some(match line.split_once([' ', '\t']) {
        Some((interp, arg)) => (interp, Some(arg.trim_matches([' ', '\t'])).filter(|a| !a.is_empty())),
        None => (line, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shebang_line_splits_into_the_interpreter_and_one_argument_as_the_kernel_splits_it() {
        assert_eq!(interpreter("/bin/sh"), Some(("/bin/sh", None)));
        assert_eq!(interpreter(" /usr/bin/env  python3 -u \r"), Some(("/usr/bin/env", Some("python3 -u"))));
        assert_eq!(interpreter("/surge/venv/bin/python3\t-I"), Some(("/surge/venv/bin/python3", Some("-I"))));
        assert_eq!(interpreter("   "), None);
    }
}
