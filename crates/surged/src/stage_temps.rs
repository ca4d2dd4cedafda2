//! Who is copying into each stage-out temp, so that the temp of a
//! stage-out nobody will finish is removed rather than left on the PFS for
//! good (a hidden file the full size of the file, which also keeps its
//! directory from being removed).
//!
//! The namespace records every temp it creates (`Namespace::stage_begin`,
//! table `stage_temps`) until its commit or abort; this map, in daemon 0's
//! memory, says which client began it. A stage-out is abandoned, and its
//! temp removed (`Namespace::remove_stage_temps`), when:
//! - its client's last connection to daemon 0 ends (the client exited or
//!   was killed mid-copy) — daemon 0's own demotions, which run in its
//!   process (`ClientId::DAEMON`), end with a commit or an abort there;
//! - daemon 0 starts: every temp recorded then was begun by a daemon 0
//!   that is gone, and no commit of it can be accepted;
//! - the orphan collector finds a recorded temp no client owns (a removal
//!   that failed before, the PFS unreachable at the time).
//!
//! A temp is created and its owner entered under one lock, which the
//! collector holds while it removes: it never sees a live stage-out's temp
//! without its owner.

use crate::failure::Failure;
use crate::handles::ClientId;
use crate::locking::lock;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct StageTemps {
    owners: Mutex<HashMap<String, ClientId>>,
}

impl StageTemps {
    /// Begins a stage-out of `client`'s: `make` creates the temp and
    /// returns its path (empty: no temp, a link staged at once).
    pub fn begin(&self, client: ClientId, make: impl FnOnce() -> Result<String, Failure>) -> Result<String, Failure> {
        let mut owners = lock(&self.owners);
        let temp = make()?;
        if !temp.is_empty() {
            owners.insert(temp.clone(), client);
        }
        Ok(temp)
    }

    /// The stage-out into `temp` ended (committed or aborted).
    pub fn ended(&self, temp: &str) {
        lock(&self.owners).remove(temp);
    }

    /// The temps of `client`, whose last connection ended: its stage-outs
    /// under way are abandoned. None for the daemons' own.
    pub fn abandoned_by(&self, client: ClientId) -> Vec<String> {
        if client == ClientId::DAEMON {
            return Vec::new();
        }
        let mut owners = lock(&self.owners);
        let gone: Vec<String> = owners.iter().filter(|(_, c)| **c == client).map(|(t, _)| t.clone()).collect();
        for temp in &gone {
            owners.remove(temp);
        }
        gone
    }

    /// Runs `sweep` with the question "is this temp's stage-out under
    /// way?", no stage-out beginning meanwhile.
    pub fn sweep<T>(&self, sweep: impl FnOnce(&dyn Fn(&str) -> bool) -> T) -> T {
        let owners = lock(&self.owners);
        sweep(&|temp| owners.contains_key(temp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_temps_are_abandoned_with_it_and_the_daemons_never() {
        let temps = StageTemps::default();
        let (a, b) = (ClientId { instance: 1, pid: 10 }, ClientId { instance: 2, pid: 20 });
        for (client, temp) in [(a, "/.f.surge-stage.1.00000000"), (b, "/.g.surge-stage.2.00000000")] {
            temps.begin(client, || Ok(temp.to_string())).unwrap();
        }
        temps.begin(ClientId::DAEMON, || Ok("/.h.surge-stage.3.00000000".to_string())).unwrap();
        assert_eq!(temps.begin(a, || Ok(String::new())).unwrap(), "", "a link has no temp");
        assert!(temps.begin(a, || Err(Failure::new(surge_proto::Errno::ENOSPC, "full"))).is_err());
        assert_eq!(temps.abandoned_by(a), ["/.f.surge-stage.1.00000000"]);
        assert!(temps.abandoned_by(a).is_empty());
        assert!(temps.abandoned_by(ClientId::DAEMON).is_empty());
        temps.ended("/.g.surge-stage.2.00000000");
        assert!(temps.abandoned_by(b).is_empty(), "committed before its client left");
        temps.sweep(|under_way| {
            assert!(under_way("/.h.surge-stage.3.00000000"));
            assert!(!under_way("/.f.surge-stage.1.00000000"));
        });
    }
}
