//! How the namespace is kept: by daemon 0 alone (`one`), or spread over
//! every daemon by a hash of each name's directory (`hashed`, see
//! `surge_proto::shards`). Chosen at `surge start`/`surge run`, given to
//! every daemon and recorded in the cluster file, so that every client
//! routes each namespace request to the daemon that holds it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NamespacePolicy {
    /// Daemon 0 keeps the whole namespace.
    #[default]
    One,
    /// Each daemon keeps the entries of the directories that hash to it.
    Hashed,
}

impl NamespacePolicy {
    /// The namespace's shards in a cluster of `daemons` daemons.
    pub fn shards(self, daemons: u32) -> u32 {
        match self {
            NamespacePolicy::One => 1,
            NamespacePolicy::Hashed => daemons.max(1),
        }
    }
}

impl FromStr for NamespacePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "one" => Ok(NamespacePolicy::One),
            "hashed" => Ok(NamespacePolicy::Hashed),
            _ => Err(format!(
                "unknown namespace policy {s:?}: `one` (daemon 0 keeps it) or `hashed` (spread over the daemons)"
            )),
        }
    }
}

impl fmt::Display for NamespacePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NamespacePolicy::One => "one",
            NamespacePolicy::Hashed => "hashed",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_back_as_written_and_hashed_has_a_shard_per_daemon() {
        for p in [NamespacePolicy::One, NamespacePolicy::Hashed] {
            assert_eq!(p.to_string().parse::<NamespacePolicy>(), Ok(p));
        }
        assert!("sharded".parse::<NamespacePolicy>().unwrap_err().contains("hashed"));
        assert_eq!(NamespacePolicy::One.shards(4), 1);
        assert_eq!(NamespacePolicy::Hashed.shards(4), 4);
    }
}
