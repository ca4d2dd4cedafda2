//! Errors, each worded to say what to do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// Network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN.
    NotRoot,
    /// A program the testbed runs is not installed.
    MissingTool {
        tool: &'static str,
        package: &'static str,
    },
    /// The spec or a command-line value is out of range; the text says which and why.
    InvalidSpec(String),
    AlreadyUp {
        name: String,
    },
    NotUp {
        name: String,
        state_file: PathBuf,
    },
    /// An `ip`/`tc` command failed.
    Command {
        command: String,
        stderr: String,
    },
    /// The daemons did not come up; the text quotes what `surge start` said.
    DaemonStart(String),
    Io {
        what: String,
        source: io::Error,
    },
    /// The state file exists but cannot be used.
    State {
        path: PathBuf,
        why: String,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io { what: what.into(), source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotRoot => write!(
                f,
                "surge testbed needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) to make network namespaces: run it as root"
            ),
            Error::MissingTool { tool, package } => {
                write!(f, "`{tool}` is not installed: install {package} (e.g. `apt-get install {package}`)")
            }
            Error::InvalidSpec(why) => f.write_str(why),
            Error::AlreadyUp { name } => {
                write!(f, "testbed {name} is already up; `surge testbed down{}` first", name_flag(name))
            }
            Error::NotUp { name, state_file } => write!(
                f,
                "testbed {name} is not up (no state file {}): start it with `surge testbed up{} --hosts K`",
                state_file.display(),
                name_flag(name)
            ),
            Error::Command { command, stderr } => write!(f, "`{command}` failed: {}", stderr.trim()),
            Error::DaemonStart(why) => f.write_str(why),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::State { path, why } => write!(
                f,
                "testbed state file {} is unusable ({why}); remove the testbed with `surge testbed down`",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// ` --name N` for commands we suggest, unless N is the default.
pub(crate) fn name_flag(name: &str) -> String {
    if name == crate::DEFAULT_NAME {
        String::new()
    } else {
        format!(" --name {name}")
    }
}
