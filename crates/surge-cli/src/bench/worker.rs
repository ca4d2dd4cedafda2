//! One benchmark client process (`surge bench-worker`, hidden): waits for
//! a common start time, does its share of I/O against Surge or a plain
//! directory on one or more threads (a file each), and prints
//! "<start_ns> <end_ns> <bytes or ops>".

use crate::cmd::CmdResult;
use clap::{Args, ValueEnum};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use surge_client::Client;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The Surge cluster, through the client library.
    Surge,
    /// Plain files in a directory (the baseline).
    Direct,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Write,
    Read,
    Create,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[arg(long, value_enum)]
    pub target: Target,
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Surge: the cluster file; direct: the directory.
    #[arg(long)]
    pub location: PathBuf,
    #[arg(long)]
    pub rank: u32,
    #[arg(long, default_value_t = 1 << 20)]
    pub xfer: usize,
    /// Bytes per process (write/read) or files per process (create).
    #[arg(long)]
    pub amount: u64,
    /// Wall-clock time (ns since the epoch) at which every worker starts.
    #[arg(long)]
    pub go_at_ns: u128,
    /// Threads, each doing `amount` on a file of its own (write/read).
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// A deterministic, incompressible-enough pattern so reads can be checked.
fn fill(buf: &mut [u8], rank: u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(rank).to_le_bytes()[1];
    }
}

/// Sequential I/O: calls `transfer(offset)` at increasing offsets until
/// `amount` bytes moved; a transfer that moves nothing means the file ended early.
fn sweep(name: &str, amount: u64, mut transfer: impl FnMut(u64) -> Result<usize, String>) -> Result<u64, String> {
    let mut off = 0;
    while off < amount {
        let n = transfer(off)?;
        if n == 0 {
            return Err(format!("{name} ended at {off}, expected {amount}"));
        }
        off += n as u64;
    }
    Ok(off)
}

pub fn run(a: WorkerArgs) -> CmdResult {
    let client = match a.target {
        Target::Surge => Some(Client::connect(&a.location).map_err(|e| e.to_string())?),
        Target::Direct => None,
    };
    if a.threads > 1 && a.workload == Workload::Create {
        return Err("--threads applies to write and read only".into());
    }
    let wait = a.go_at_ns.saturating_sub(now_ns());
    std::thread::sleep(Duration::from_nanos(wait.min(10_000_000_000) as u64));
    let start = now_ns();
    let done = if a.threads <= 1 {
        one_stream(&a, client.as_ref(), format!("rank{}", a.rank), a.rank)?
    } else {
        let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..a.threads)
                .map(|t| {
                    let (a, client) = (&a, client.as_ref());
                    s.spawn(move || one_stream(a, client, format!("rank{}-t{t}", a.rank), a.rank * 1000 + t))
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err("a worker thread panicked".into()))).collect()
        });
        results.into_iter().sum::<Result<u64, String>>()?
    };
    let end = now_ns();
    println!("{start} {end} {done}");
    Ok(ExitCode::SUCCESS)
}

/// One thread's share: the workload on file `name`, data seeded by `seed`.
fn one_stream(a: &WorkerArgs, client: Option<&Client>, name: String, seed: u32) -> Result<u64, String> {
    let mut buf = vec![0u8; a.xfer];
    fill(&mut buf, seed);
    let done = match (a.workload, client) {
        (Workload::Create, Some(c)) => {
            let dir = format!("/bench-create-{}", a.rank);
            c.mkdir(&dir, 0o755).map_err(|e| e.to_string())?;
            for i in 0..a.amount {
                c.open(&format!("{dir}/f{i}"), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
                    .map_err(|e| e.to_string())?;
            }
            a.amount
        }
        (Workload::Create, None) => {
            let dir = a.location.join(format!("bench-create-{}", a.rank));
            fs::create_dir(&dir).map_err(|e| e.to_string())?;
            for i in 0..a.amount {
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dir.join(format!("f{i}")))
                    .map_err(|e| e.to_string())?;
            }
            a.amount
        }
        (Workload::Write, Some(c)) => {
            let f = c
                .open(&format!("/{name}"), libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, 0o644)
                .map_err(|e| e.to_string())?;
            let done = sweep(&name, a.amount, |off| f.write_at(&buf, off).map_err(|e| e.to_string()))?;
            f.fsync().map_err(|e| e.to_string())?;
            done
        }
        (Workload::Write, None) => {
            let f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(a.location.join(&name))
                .map_err(|e| e.to_string())?;
            let done =
                sweep(&name, a.amount, |off| f.write_all_at(&buf, off).map(|()| buf.len()).map_err(|e| e.to_string()))?;
            f.sync_all().map_err(|e| e.to_string())?;
            done
        }
        (Workload::Read, Some(c)) => {
            let f = c.open(&format!("/{name}"), libc::O_RDONLY, 0).map_err(|e| e.to_string())?;
            let written = buf.clone();
            sweep(&name, a.amount, |off| {
                let n = f.read_at(&mut buf, off).map_err(|e| e.to_string())?;
                verify(&name, &buf[..n], &written, off).map(|()| n)
            })?
        }
        (Workload::Read, None) => {
            let f = fs::File::open(a.location.join(&name)).map_err(|e| e.to_string())?;
            let written = buf.clone();
            sweep(&name, a.amount, |off| {
                let n = f.read_at(&mut buf, off).map_err(|e| e.to_string())?;
                verify(&name, &buf[..n], &written, off).map(|()| n)
            })?
        }
    };
    Ok(done)
}

/// Checks bytes read at file offset `offset` of a file written as
/// `written` over and over (every write puts the whole buffer at the next
/// multiple of its length).
fn verify(name: &str, got: &[u8], written: &[u8], offset: u64) -> Result<(), String> {
    let mut at = (offset % written.len() as u64) as usize;
    let mut rest = got;
    while !rest.is_empty() {
        let n = rest.len().min(written.len() - at);
        if rest[..n] != written[at..at + n] {
            let bad = rest.iter().zip(&written[at..]).position(|(g, w)| g != w).unwrap_or(0);
            let pos = offset + (got.len() - rest.len() + bad) as u64;
            return Err(format!("{name}: the byte read back at offset {pos} differs from the one written"));
        }
        rest = &rest[n..];
        at = 0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buffer_read_is_checked_where_it_lies_in_the_file() {
        let mut written = vec![0u8; 8];
        fill(&mut written, 3);
        let file: Vec<u8> = written.iter().cycle().take(32).copied().collect();
        // Whole buffers, a read across the boundary between two writes, a short read.
        for (offset, len) in [(0, 8), (8, 8), (24, 8), (5, 8), (13, 3), (30, 2)] {
            assert_eq!(verify("f", &file[offset..offset + len], &written, offset as u64), Ok(()), "at {offset}");
        }
        let mut damaged = file.clone();
        damaged[19] ^= 1;
        let err = verify("f", &damaged[16..24], &written, 16).unwrap_err();
        assert!(err.contains("offset 19"), "{err}");
        assert!(verify("f", &file[0..8], &written, 1).is_err(), "bytes from the wrong offset");
    }
}
