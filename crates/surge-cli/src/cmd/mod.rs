//! One module per group of subcommands, each holding its commands' arguments
//! (`...Args`) beside the functions that run them; this file holds what
//! they share (the client context, `PathsArgs`, `LongHelpOnly`) and names
//! the path rule (paths.rs) and the installed parts (install.rs) they use.

pub mod cluster;
pub mod drain;
pub mod files;
pub mod fsck;
pub mod mount;
mod orphans;
mod paths;
mod progress;
pub mod run;
pub mod scrub;
mod signals;
pub mod stage_out;
mod staging;
pub mod stripe;
pub mod top;
pub mod tune;

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use surge_client::Client;

pub use crate::install::preload_library;
pub use paths::{mount_prefix, ns_path, spelled_in_surge, validated_mount};

#[derive(Args)]
pub struct PathsArgs {
    #[arg(required = true)]
    pub paths: Vec<String>,
}

/// `--help` without `-h`, for commands where `-h` means human-readable
/// sizes, as in coreutils (their `#[command(disable_help_flag = true)]`).
#[derive(Args)]
pub struct LongHelpOnly {
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// Errors are reported as "surge: <message>" with exit status 1.
pub type CmdResult = Result<ExitCode, String>;

pub struct Ctx {
    pub cluster_file: PathBuf,
}

impl Ctx {
    pub fn client(&self) -> Result<Client, String> {
        Client::connect(&self.cluster_file).map_err(|e| e.to_string())
    }
}
