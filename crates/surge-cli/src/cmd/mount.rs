//! `surge mount` and `surge umount`: the kernel-visible Surge file system
//! (crates/surge-fuse). `surge mount` starts a serving process of its own
//! (`surge mount --foreground`) and returns once the mount answers;
//! `surge run` uses the same [`Mounted`] for the length of a job.

use super::{CmdResult, Ctx};
use clap::Args;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use surge_fuse::mountpoint::{self, State};

#[derive(Args)]
pub struct MountArgs {
    /// Where to mount (default: $SURGE_MOUNT, else /surge); created when missing, refused when it
    /// holds files unless --force.
    #[arg(value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
    /// Mount over a directory that holds files (they are hidden until `surge umount`).
    #[arg(long)]
    pub force: bool,
    /// Serve in this process until unmounted or signalled, instead of starting a server.
    #[arg(long)]
    pub foreground: bool,
    /// Threads serving kernel requests at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Cache file data in the kernel's page cache instead of direct I/O (faster small
    /// rereads; bytes written by the interposer or another node show after reopening).
    #[arg(long)]
    pub page_cache: bool,
    /// Let other users use the mount (needs user_allow_other in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// The server's log (default: mount.log next to the cluster file).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Append the Surge path of each file opened for writing to FILE (what `surge run` stages out).
    #[arg(long, value_name = "FILE")]
    pub writers_journal: Option<PathBuf>,
}

impl MountArgs {
    pub fn config(&self) -> surge_fuse::MountConfig {
        surge_fuse::MountConfig {
            threads: self.threads as usize,
            direct_io: !self.page_cache,
            allow_other: self.allow_other,
            writers_journal: self.writers_journal.clone(),
            ..Default::default()
        }
    }

    /// The serving options, for the server process's command line.
    pub fn forwarded(&self) -> Vec<String> {
        let mut args = vec![format!("--threads={}", self.threads)];
        if self.force {
            args.push("--force".into());
        }
        if self.page_cache {
            args.push("--page-cache".into());
        }
        if self.allow_other {
            args.push("--allow-other".into());
        }
        if let Some(journal) = &self.writers_journal {
            args.push(format!("--writers-journal={}", journal.display()));
        }
        args
    }
}

impl Default for MountArgs {
    fn default() -> Self {
        MountArgs {
            mountpoint: None,
            force: false,
            foreground: false,
            threads: 8,
            page_cache: false,
            allow_other: false,
            log: None,
            writers_journal: None,
        }
    }
}

#[derive(Args)]
pub struct UmountArgs {
    /// The mount (default: $SURGE_MOUNT, else /surge).
    #[arg(value_name = "DIR")]
    pub mountpoint: Option<PathBuf>,
}

/// How long a new mount may take to answer, and a server to exit after its unmount.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(15);

pub fn mount(ctx: &Ctx, a: MountArgs) -> CmdResult {
    let mountpoint = mount_point(&a.mountpoint)?;
    if a.foreground {
        return serve(ctx, &a, &mountpoint);
    }
    let mounted = Mounted::start(&ctx.cluster_file, &mountpoint, &a, ServerLife::Detached)?;
    note!(
        "surge: {} serves {} (server pid {}, log {})",
        mountpoint.display(),
        ctx.cluster_file.display(),
        mounted.pid(),
        mounted.log.display()
    );
    // The server outlives this command: `surge umount` ends it.
    std::mem::forget(mounted);
    Ok(ExitCode::SUCCESS)
}

pub fn umount(a: UmountArgs) -> CmdResult {
    let mountpoint = mount_point(&a.mountpoint)?;
    let shown = mountpoint.display();
    match mountpoint::state(&mountpoint).map_err(|e| format!("reading the mount table: {e}"))? {
        State::Unmounted => Err(format!("nothing is mounted at {shown}")),
        State::Other { fstype } => Err(format!("{shown} is a {fstype} mount, not Surge's: not unmounting it")),
        State::Stale => {
            mountpoint::unmount(&mountpoint).map_err(|e| format!("removing the stale mount at {shown}: {e}"))?;
            note!("surge: removed the stale mount at {shown} (its server had died)");
            Ok(ExitCode::SUCCESS)
        }
        State::Live { pid, .. } => {
            mountpoint::unmount(&mountpoint).map_err(|e| format!("unmounting {shown}: {e}"))?;
            if !wait_for_exit(pid, MOUNT_TIMEOUT) {
                note!("surge: {shown} is detached; its server (pid {pid}) still serves files that were open");
            }
            note!("surge: unmounted {shown}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The mount point as an absolute path.
pub fn mount_point(given: &Option<PathBuf>) -> Result<PathBuf, String> {
    let path = given.clone().unwrap_or_else(|| PathBuf::from(super::mount_prefix()));
    let path = std::path::absolute(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if path == Path::new("/") {
        return Err("the mount point must not be /".into());
    }
    Ok(path)
}

/// A mount over a directory that holds files hides them: refused unless
/// `force` (then said on stderr, so it is never silent).
pub fn refuse_to_hide(mountpoint: &Path, force: bool) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(mountpoint) else {
        // Missing (created later) or not a directory (mountpoint::prepare says so).
        return Ok(());
    };
    let held = entries.count();
    let shown = mountpoint.display();
    match (held, force) {
        (0, _) => Ok(()),
        (_, false) => Err(format!(
            "{shown} is a directory that holds files ({held} entries), which a mount would hide: pick an empty \
             or new directory, or mount over them with --force (surge run: --force-mount)"
        )),
        (_, true) => {
            note!("surge: mounting over {shown}: its {held} entries are hidden until `surge umount {shown}`");
            Ok(())
        }
    }
}

/// `surge mount --foreground`: serves until unmounted or signalled (SIGINT,
/// SIGTERM and SIGHUP unmount first, so no stale mount is left).
fn serve(ctx: &Ctx, a: &MountArgs, mountpoint: &Path) -> CmdResult {
    if let Some(why) = mountpoint::unavailable() {
        return Err(format!("FUSE is unavailable here: {why}"));
    }
    refuse_to_hide(mountpoint, a.force)?;
    mountpoint::prepare(mountpoint)?;
    let client = ctx.client()?;
    unmount_on_signals(mountpoint.to_path_buf())?;
    surge_fuse::serve(client, mountpoint, a.config()).map_err(|e| format!("serving {}: {e}", mountpoint.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Blocks the ending signals in every thread and waits for them in one,
/// which unmounts: the session then ends and `serve` returns.
fn unmount_on_signals(mountpoint: PathBuf) -> Result<(), String> {
    // SAFETY: plain signal-set manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err("cannot block signals".into());
        }
        set
    };
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: set is a valid signal set; sig receives the signal number.
        unsafe { libc::sigwait(&set, &mut sig) };
        note!("surge mount: signal {sig}: unmounting {}", mountpoint.display());
        if let Err(e) = mountpoint::unmount(&mountpoint) {
            note!("surge mount: unmounting {}: {e}", mountpoint.display());
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

fn wait_for_exit(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        // SAFETY: signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A mount served by a child process of this one.
pub struct Mounted {
    child: Child,
    pub mountpoint: PathBuf,
    pub log: PathBuf,
}

/// How long a mount server started by [`Mounted::start`] lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerLife {
    /// Until `surge umount` (what `surge mount` starts).
    Detached,
    /// Also ends (unmounting) when the process that started it dies, so a
    /// `surge run` killed outright does not leave its job's mount served.
    EndsWithCaller,
}

impl Mounted {
    /// Starts `surge mount --foreground` for the cluster and waits until the mount is live.
    pub fn start(cluster_file: &Path, mountpoint: &Path, a: &MountArgs, life: ServerLife) -> Result<Mounted, String> {
        if let Some(why) = mountpoint::unavailable() {
            return Err(format!("FUSE is unavailable here: {why}"));
        }
        refuse_to_hide(mountpoint, a.force)?;
        mountpoint::prepare(mountpoint)?;
        let log = a.log.clone().unwrap_or_else(|| cluster_file.with_file_name("mount.log"));
        let log_file = surge_cluster::open_private_log(&log)
            .map_err(|e| format!("cannot open the mount log {}: {e}", log.display()))?;
        let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the surge binary: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("--cluster").arg(cluster_file).arg("mount").arg("--foreground").args(a.forwarded()).arg(mountpoint);
        // The server must never run the interposer on itself.
        cmd.env_remove("LD_PRELOAD").stdin(Stdio::null()).stdout(log_file).stderr(err_file);
        // Its own session: a job's Ctrl-C reaches `surge run`, which unmounts in order. With
        // `EndsWithCaller`, SIGTERM (it unmounts then) when the caller dies.
        // SAFETY: setsid and prctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                libc::setsid();
                if life == ServerLife::EndsWithCaller {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start the mount server: {e}"))?;
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        loop {
            if let Ok(State::Live { pid, .. }) = mountpoint::state(mountpoint) {
                if pid == child.id() {
                    return Ok(Mounted { child, mountpoint: mountpoint.to_path_buf(), log });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("the mount server exited ({status}): {}", log_tail(&log)));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not come up within {MOUNT_TIMEOUT:?}: {}",
                    mountpoint.display(),
                    log_tail(&log)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Unmounts (lazily when files are still open) and waits for the server;
    /// a server that does not finish is killed, and its mount removed.
    pub fn unmount(mut self) -> Result<(), String> {
        let shown = self.mountpoint.display().to_string();
        let unmounted = mountpoint::unmount(&self.mountpoint).map_err(|e| format!("unmounting {shown}: {e}"));
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return unmounted;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if matches!(mountpoint::state(&self.mountpoint), Ok(State::Stale)) {
            let _ = mountpoint::unmount(&self.mountpoint);
        }
        unmounted.and(Err(format!("the server of {shown} did not exit after the unmount; it was killed")))
    }
}

/// The last lines of the mount log, for an error message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    if lines.is_empty() {
        format!("see {}", log.display())
    } else {
        lines.into_iter().rev().collect::<Vec<_>>().join(" / ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_over_files_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        refuse_to_hide(&dir.path().join("missing"), false).unwrap();
        refuse_to_hide(dir.path(), false).unwrap();
        std::fs::write(dir.path().join("precious"), b"x").unwrap();
        let err = refuse_to_hide(dir.path(), false).unwrap_err();
        assert!(err.contains("holds files") && err.contains("--force"), "{err}");
        refuse_to_hide(dir.path(), true).unwrap();
    }
}
