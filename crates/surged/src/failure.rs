//! A failed request: the errno the client reports and a message for people.

use std::fmt;
use surge_proto::Errno;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub errno: Errno,
    /// Why, in words; empty when the errno says it all.
    pub message: String,
}

impl Failure {
    pub fn new(errno: Errno, message: impl Into<String>) -> Failure {
        Failure { errno, message: message.into() }
    }

    /// The text of the error reply: the message, else the errno's description.
    pub fn text(&self) -> String {
        if self.message.is_empty() {
            self.errno.name()
        } else {
            self.message.clone()
        }
    }
}

impl From<Errno> for Failure {
    fn from(errno: Errno) -> Failure {
        Failure { errno, message: String::new() }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::from(Errno::from_io(&e))
    }
}

/// For the daemon's log: control characters in the message (which may quote
/// a client's path) are escaped, so a peer cannot forge log lines.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.errno)
        } else {
            write!(f, "{} ({})", escape_controls(&self.message), self.errno)
        }
    }
}

/// `text` with its control characters (newlines, escape sequences) escaped
/// as `\n`, `\u{1b}`, ...; the rest unchanged.
fn escape_controls(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_message_is_one_line_with_its_control_characters_escaped() {
        let failure = Failure::new(Errno::EIO, "writing /a\nsurged[0]: forged\x1b[2J");
        let logged = failure.to_string();
        assert!(logged.starts_with(r"writing /a\nsurged[0]: forged\u{1b}[2J ("), "{logged}");
    }
}
