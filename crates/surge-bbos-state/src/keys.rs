//! The Redis key names of Table 5.1 [Sung20, ch. 5] under a cluster's
//! prefix, and the way back from a key name to what it holds (for
//! snapshots). `APPID+"restart"`, `AppID+deviceID` and `APPID+"BB"` of the
//! table get a `:` between their parts, and file names a `file:` before
//! them, so that no file name can collide with another key.

use crate::state::{AppId, DeviceId};

pub const VICTIMS: &str = "V-order";
pub const CLEAN: &str = "Clean";
pub const EVICT_ORDER: &str = "E-order";
pub const DWSF: &str = "DWSF";
pub const REPLICATE_ORDER: &str = "R-order";
pub const DWPP: &str = "DWPP";
/// Surge's key beyond the table: the buffer's measured rates.
pub const CALIBRATION: &str = "Calibration";

/// One key under a prefix, as [`Keys::parse`] reads it back.
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'a> {
    Fixed(&'static str),
    Restarts(AppId),
    Checkpoints(AppId, DeviceId),
    Location(&'a str),
    InBuffer(AppId),
}

/// The key names of one cluster: `surge:SCOPE:NAME`.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(scope: &str) -> Keys {
        Keys { prefix: format!("surge:{scope}:") }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A SCAN pattern matching exactly this prefix's keys.
    pub fn pattern(&self) -> String {
        let mut pattern: String =
            self.prefix.chars().flat_map(|c| if "*?[]\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect();
        pattern.push('*');
        pattern
    }

    pub fn fixed(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn restarts(&self, app: AppId) -> String {
        format!("{}app:{}:restart", self.prefix, app.0)
    }

    pub fn checkpoints(&self, app: AppId, device: DeviceId) -> String {
        format!("{}app:{}:dev:{}", self.prefix, app.0, device.0)
    }

    pub fn location(&self, file: &str) -> String {
        format!("{}file:{file}", self.prefix)
    }

    pub fn in_buffer(&self, app: AppId) -> String {
        format!("{}app:{}:BB", self.prefix, app.0)
    }

    /// What `key` (one of this prefix's) holds; `None` for a key Surge
    /// does not write.
    pub fn parse<'a>(&self, key: &'a str) -> Option<Key<'a>> {
        let name = key.strip_prefix(&self.prefix)?;
        if let Some(fixed) =
            [VICTIMS, CLEAN, EVICT_ORDER, DWSF, REPLICATE_ORDER, DWPP, CALIBRATION].into_iter().find(|f| *f == name)
        {
            return Some(Key::Fixed(fixed));
        }
        if let Some(file) = name.strip_prefix("file:") {
            return Some(Key::Location(file));
        }
        let (app, rest) = name.strip_prefix("app:")?.split_once(':')?;
        let app = parse_app(app)?;
        match rest {
            "restart" => Some(Key::Restarts(app)),
            "BB" => Some(Key::InBuffer(app)),
            _ => Some(Key::Checkpoints(app, DeviceId(rest.strip_prefix("dev:")?.parse().ok()?))),
        }
    }
}

/// An application id as the lists hold it (decimal).
pub fn parse_app(stored: &str) -> Option<AppId> {
    stored.parse().ok().map(AppId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_name_reads_back_as_what_it_holds() {
        let keys = Keys::new("c1");
        let (app, device) = (AppId(7), DeviceId(2));
        assert_eq!(keys.parse(&keys.fixed(VICTIMS)), Some(Key::Fixed(VICTIMS)));
        assert_eq!(keys.parse(&keys.restarts(app)), Some(Key::Restarts(app)));
        assert_eq!(keys.parse(&keys.checkpoints(app, device)), Some(Key::Checkpoints(app, device)));
        assert_eq!(keys.parse(&keys.location("app:7:BB")), Some(Key::Location("app:7:BB")));
        assert_eq!(keys.parse(&keys.in_buffer(app)), Some(Key::InBuffer(app)));
        assert_eq!(keys.parse("surge:c1:app:x:BB"), None);
        assert_eq!(keys.parse("surge:c2:DWSF"), None, "another cluster's key");
    }

    #[test]
    fn a_scope_with_glob_characters_matches_only_itself() {
        assert_eq!(Keys::new("a*[b]").pattern(), "surge:a\\*\\[b\\]:*");
    }
}
