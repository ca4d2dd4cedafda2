//! `surge tune`: hands its arguments to the Python tuner (tuner/, package
//! surge_tune).

use super::CmdResult;
use clap::Args;

#[derive(Args)]
pub struct TuneArgs {
    /// Passed to `python3 -m surge_tune` as they are.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

/// `surge tune ...` is the Python tuner; it finds this binary in SURGE_BIN
/// (for `surge tune layout --apply`, which runs `surge setstripe`).
pub fn tune(a: TuneArgs) -> CmdResult {
    use std::os::unix::process::CommandExt;
    let (mut cmd, python) = tuner_command();
    let err = cmd.args(&a.args).exec();
    Err(format!("cannot run the tuner with {python} ({err}): {INSTALL_HINT}"))
}

pub const INSTALL_HINT: &str = "install it with scripts/setup.sh (pip install -e tuner)";

/// `python3 -m surge_tune` (SURGE_PYTHON names another interpreter) with
/// SURGE_BIN set to this binary, and the interpreter's name for messages.
pub fn tuner_command() -> (std::process::Command, String) {
    let python = std::env::var("SURGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "surge_tune"]);
    if let Ok(me) = std::env::current_exe() {
        cmd.env("SURGE_BIN", me);
    }
    (cmd, python)
}
