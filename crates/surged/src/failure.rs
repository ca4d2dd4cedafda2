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

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.errno)
        } else {
            write!(f, "{} ({})", self.message, self.errno)
        }
    }
}

impl std::error::Error for Failure {}
