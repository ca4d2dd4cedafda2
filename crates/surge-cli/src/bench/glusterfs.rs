//! GlusterFS as a benchmark peer: the file system users would otherwise
//! mount over a node's fast device. One volume of one brick in a directory
//! of the bench's scratch (so on the same tmpfs as Surge's buffer), mounted
//! through GlusterFS's own FUSE client, torn down on drop: unmounted, the
//! volume stopped and deleted, and glusterd stopped if the bench started it.
//! Needs root and glusterfs-server (scripts/setup.sh installs it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct GlusterPeer {
    volume: String,
    pub mount: PathBuf,
    mounted: bool,
    /// glusterd's pid when the bench started it.
    started_glusterd: Option<i32>,
}

/// `gluster --mode=script ARGS`: its output, or an error with the command and what it said.
fn gluster(args: &[&str]) -> Result<String, String> {
    let out = Command::new("gluster")
        .arg("--mode=script")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run gluster (install glusterfs-server: scripts/setup.sh): {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("`gluster {}` failed ({}): {}", args.join(" "), out.status, text.trim()))
    }
}

/// Whether glusterd answers.
fn glusterd_answers() -> bool {
    gluster(&["volume", "list"]).is_ok()
}

impl GlusterPeer {
    /// A volume named after this process with its brick at `root`/gluster-brick, mounted at `root`/gluster.
    pub fn start(root: &Path) -> Result<GlusterPeer, String> {
        let mut peer = GlusterPeer {
            volume: format!("surge-bench-{}", std::process::id()),
            mount: root.join("gluster"),
            mounted: false,
            started_glusterd: None,
        };
        if !glusterd_answers() {
            let pid_file = root.join("glusterd.pid");
            let status = Command::new("glusterd")
                .arg("-p")
                .arg(&pid_file)
                .status()
                .map_err(|e| format!("cannot start glusterd (install glusterfs-server: scripts/setup.sh): {e}"))?;
            if !status.success() {
                return Err(format!("glusterd failed to start ({status})"));
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while !glusterd_answers() {
                if Instant::now() > deadline {
                    return Err("glusterd started but does not answer `gluster volume list` within 20 s".into());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            peer.started_glusterd = fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse().ok());
        }
        let brick = root.join("gluster-brick");
        fs::create_dir_all(&brick).map_err(|e| format!("{}: {e}", brick.display()))?;
        fs::create_dir_all(&peer.mount).map_err(|e| format!("{}: {e}", peer.mount.display()))?;
        let host = fs::read_to_string("/proc/sys/kernel/hostname").map_err(|e| format!("this host's name: {e}"))?;
        let host = host.trim();
        // `force`: GlusterFS refuses a brick on the root file system's tree without it.
        gluster(&["volume", "create", &peer.volume, &format!("{host}:{}", brick.display()), "force"])?;
        gluster(&["volume", "start", &peer.volume])?;
        let status = Command::new("mount")
            .args(["-t", "glusterfs", &format!("{host}:/{}", peer.volume)])
            .arg(&peer.mount)
            .status()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.success() {
            return Err(format!("mounting the GlusterFS volume {} failed ({status})", peer.volume));
        }
        peer.mounted = true;
        Ok(peer)
    }
}

impl Drop for GlusterPeer {
    fn drop(&mut self) {
        if self.mounted {
            match Command::new("umount").arg(&self.mount).status() {
                Ok(s) if s.success() => {}
                other => note!("surge bench: cannot unmount GlusterFS at {}: {other:?}", self.mount.display()),
            }
        }
        for args in [["volume", "stop", &self.volume], ["volume", "delete", &self.volume]] {
            if let Err(e) = gluster(&args) {
                note!("surge bench: {e}");
            }
        }
        if let Some(pid) = self.started_glusterd {
            // Only the glusterd this bench started, by its pid.
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}
