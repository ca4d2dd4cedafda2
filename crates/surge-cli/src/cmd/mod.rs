//! One module per group of subcommands, each holding its commands' arguments
//! (`...Args`) beside the functions that run them; this file holds what
//! they share (paths, the client context, `PathsArgs`).

pub mod cluster;
pub mod files;
pub mod mount;
mod orphans;
pub mod run;
pub mod scrub;
mod signals;
pub mod stage_out;
mod staging;
pub mod stripe;
pub mod tune;

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use surge_client::Client;

#[derive(Args)]
pub struct PathsArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// Errors are reported as "surge: <message>" with exit status 1.
pub type CmdResult = Result<ExitCode, String>;

/// The interposer shim next to this binary (or `SURGE_PRELOAD`).
pub fn preload_library() -> Result<PathBuf, String> {
    let (lib, how) = match std::env::var_os("SURGE_PRELOAD") {
        Some(named) => (PathBuf::from(named), "unset SURGE_PRELOAD or point it at libsurge_preload.so"),
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("cannot find the surge binary: {e}"))?;
            (exe.with_file_name("libsurge_preload.so"), "build Surge with `make build`")
        }
    };
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!("the interposer {} is missing: {how}", lib.display()))
    }
}

pub struct Ctx {
    pub cluster_file: PathBuf,
}

impl Ctx {
    pub fn client(&self) -> Result<Client, String> {
        Client::connect(&self.cluster_file).map_err(|e| e.to_string())
    }
}

/// The mount prefix the interposer and the CLI recognise (SURGE_MOUNT, default /surge).
pub fn mount_prefix() -> String {
    std::env::var("SURGE_MOUNT").ok().filter(|m| m.starts_with('/')).unwrap_or_else(|| "/surge".into())
}

/// A mount prefix as given (--mount / SURGE_MOUNT): absolute, not "/".
pub fn validated_mount(mount: &str) -> Result<String, String> {
    let trimmed = mount.trim_end_matches('/');
    if !mount.starts_with('/') || trimmed.is_empty() {
        return Err(format!("the mount prefix {mount:?} must be an absolute path other than /"));
    }
    Ok(trimmed.to_string())
}

/// A path argument as a namespace path, when it names something in Surge:
/// "surge:/a", "<mount>/a" or "/a" (the last only where `bare_is_surge`).
pub fn surge_path(arg: &str, bare_is_surge: bool) -> Option<Result<String, String>> {
    surge_path_in(arg, &mount_prefix(), bare_is_surge)
}

/// [`surge_path`] with the mount prefix given (a job's `--mount`).
pub fn surge_path_in(arg: &str, mount: &str, bare_is_surge: bool) -> Option<Result<String, String>> {
    let inner = if let Some(rest) = arg.strip_prefix("surge:") {
        rest
    } else if let Some(rest) =
        arg.strip_prefix(mount.trim_end_matches('/')).filter(|r| r.is_empty() || r.starts_with('/'))
    {
        rest
    } else if bare_is_surge {
        arg
    } else {
        return None;
    };
    let inner = if inner.is_empty() { "/" } else { inner };
    Some(surge_proto::path::resolve("/", inner).map_err(|e| format!("{arg}: not a valid Surge path ({e})")))
}

/// A path argument of a command that only takes Surge paths.
pub fn ns_path(arg: &str) -> Result<String, String> {
    surge_path(arg, true).expect("bare paths are Surge paths here")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_paths_are_recognised_in_every_spelling() {
        std::env::remove_var("SURGE_MOUNT");
        assert_eq!(surge_path("surge:/a/b", false).unwrap().unwrap(), "/a/b");
        assert_eq!(surge_path("/surge/a/../b", false).unwrap().unwrap(), "/b");
        assert_eq!(surge_path("/surge", false).unwrap().unwrap(), "/");
        assert!(surge_path("/surgeon/x", false).is_none());
        assert!(surge_path("./local", false).is_none());
        assert_eq!(ns_path("/ckpt").unwrap(), "/ckpt");
    }
}
