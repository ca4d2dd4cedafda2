//! `surge fsck` on daemon 0 (`Request::Fsck`): the namespace checked
//! against every daemon's objects, on the running cluster, read-only
//! unless asked to repair. What it finds, by class (`FsckClass`):
//! - objects of no inode in use: orphans once unchanged for the orphan
//!   grace (`--orphan-grace`), young orphans (a note) before;
//! - objects on a daemon their file's layout gives no stripe (stray: longer
//!   than the layout allows there, since it allows nothing);
//! - stripes whose daemon had the object and lost it (its inventory lists
//!   it, the file is gone), and files marked lost: data lost;
//! - objects whose checksum record (the sidecar's header) disagrees with
//!   the object file, or is missing or damaged: untrusted;
//! - doomed files not yet deleted, and those held for a client (a note);
//! - stage-out temps no stage-out under way owns;
//! - names marked as one of several whose inode record is missing
//!   (dangling), and link counts that disagree with the names.
//!
//! The objects are listed first and the namespace read after, as the
//! orphan collector does (`crate::collector`, whose header says why an
//! object listed so is never a live file's taken for an orphan). The stripes
//! of each file are checked by `ObjVerify` of their first block, which
//! fails saying "data lost" for a lost object and "data not trusted" for a
//! distrusted one (`crate::store`): one request per stripe, from daemon 0.
//! The damaged blocks themselves are `surge scrub`'s (`fsck --verify-data`).
//!
//! Repairs are only the safe ones: removing orphans and stray objects
//! unchanged for the grace, waking the deleter, removing abandoned temps,
//! setting link counts to the names found. Lost or untrusted data and
//! dangling names are reported, never "repaired".

use crate::background::Wake;
use crate::collector::list_objects;
use crate::failure::Failure;
use crate::namespace::{Audit, AuditedFile, Namespace, Shard};
use crate::peers::Peers;
use crate::shard;
use crate::stage_temps::StageTemps;
use crate::store::DATA_LOST;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use surge_proto::msg::{FsckClass, FsckFinding, FsckReply, ListedObject, ObjVerifyReply, FSCK_NO_DAEMON};
use surge_proto::{Errno, Request};

pub struct Fsck {
    pub namespace: Arc<Namespace>,
    pub peers: Arc<Peers>,
    pub daemons: u32,
    /// The orphan collector's grace: only objects unchanged for it are removed.
    pub grace: Duration,
    pub stage_temps: Arc<StageTemps>,
    pub deleter: Wake,
    /// This daemon's shard of a namespace spread over the daemons: only its inodes' objects are checked.
    pub shard: Option<Shard>,
}

fn finding(class: FsckClass, ino: u64, daemon: u32, path: String, detail: String) -> FsckFinding {
    FsckFinding { class, ino, daemon, path, detail, repaired: false }
}

impl Fsck {
    /// Checks everything, repairing what is safe to when `repair` is set.
    pub fn run(&self, repair: bool) -> Result<FsckReply, Failure> {
        let mut listed = Vec::new();
        for daemon in 0..self.daemons {
            let objects = list_objects(&self.peers, daemon, || false).map_err(|f| {
                Failure::new(
                    f.errno,
                    format!("fsck needs every daemon: daemon {daemon} cannot list its objects: {}", f.text()),
                )
            })?;
            listed.push((daemon, objects.into_iter().filter(|o| shard::owns(self.shard, o.ino)).collect::<Vec<_>>()));
        }
        // After the listing: see the module's header.
        let audit = self.namespace.audit()?;
        let mut reply = FsckReply {
            files: audit.files.len() as u64,
            objects: listed.iter().map(|(_, objects)| objects.len() as u64).sum(),
            findings: Vec::new(),
        };
        for (daemon, objects) in &listed {
            self.check_objects(&audit, *daemon, objects, &mut reply.findings);
        }
        for (&ino, file) in &audit.files {
            self.check_file(ino, file, &mut reply.findings)?;
        }
        check_records(&audit, &self.stage_temps, &mut reply.findings);
        if repair {
            for f in &mut reply.findings {
                f.repaired = self.repair(f, &listed, &audit)?;
            }
        }
        Ok(reply)
    }

    /// Orphans and stray objects among `objects`, daemon `daemon`'s.
    fn check_objects(&self, audit: &Audit, daemon: u32, objects: &[ListedObject], out: &mut Vec<FsckFinding>) {
        let doomed: HashSet<u64> = audit.doomed.iter().map(|d| d.ino).collect();
        let grace_ms = self.grace.as_millis() as u64;
        let idle = |o: &ListedObject| format!("unchanged for {:.1} s", o.idle_ms as f64 / 1000.0);
        for o in objects {
            match audit.files.get(&o.ino) {
                // The deleter's: reported with the doomed records.
                None if doomed.contains(&o.ino) => {}
                None => {
                    let class = if o.idle_ms >= grace_ms { FsckClass::Orphan } else { FsckClass::YoungOrphan };
                    out.push(finding(class, o.ino, daemon, String::new(), format!("object of no file, {}", idle(o))));
                }
                Some(file) if !file.layout.has_stripe_on(daemon, self.daemons) => out.push(finding(
                    FsckClass::StrayObject,
                    o.ino,
                    daemon,
                    file.names.join(" "),
                    format!("the file's layout puts no stripe on daemon {daemon}; {}", idle(o)),
                )),
                Some(_) => {}
            }
        }
    }

    /// Lost or untrusted stripes of file `ino`, and its link count.
    fn check_file(&self, ino: u64, file: &AuditedFile, out: &mut Vec<FsckFinding>) -> Result<(), Failure> {
        let path = file.names.join(" ");
        if file.lost {
            out.push(finding(FsckClass::DataLost, ino, FSCK_NO_DAEMON, path.clone(), "marked lost".into()));
        } else if file.has_objects {
            let daemons: HashSet<u32> =
                (0..file.layout.stripe_count).map(|s| file.layout.daemon_of(s, self.daemons)).collect();
            for daemon in daemons {
                let first_block = Request::ObjVerify { ino, offset: 0, len: 1 };
                match self.peers.call::<ObjVerifyReply>(daemon, &first_block) {
                    Ok(_) => {}
                    Err(f) if f.errno == Errno::EIO => {
                        let class =
                            if f.text().contains(DATA_LOST) { FsckClass::DataLost } else { FsckClass::Untrusted };
                        out.push(finding(class, ino, daemon, path.clone(), f.text()));
                    }
                    Err(f) => {
                        return Err(Failure::new(f.errno, format!("checking {path} on daemon {daemon}: {}", f.text())))
                    }
                }
            }
        }
        let names = file.names.len();
        match file.nlink {
            None => out.push(finding(
                FsckClass::Dangling,
                ino,
                FSCK_NO_DAEMON,
                path,
                "a name of several whose inode record is missing".into(),
            )),
            Some(nlink) if nlink as usize != names => out.push(finding(
                FsckClass::LinkCount,
                ino,
                FSCK_NO_DAEMON,
                path,
                format!("{names} name(s), link count {nlink}"),
            )),
            Some(_) => {}
        }
        Ok(())
    }

    /// Does the safe repair of `f`, if it has one; whether it did.
    fn repair(&self, f: &FsckFinding, listed: &[(u32, Vec<ListedObject>)], audit: &Audit) -> Result<bool, Failure> {
        match f.class {
            FsckClass::Orphan | FsckClass::StrayObject => {
                // Only what was quiet for the grace when listed: a stray object may be a write landing.
                let grace_ms = self.grace.as_millis() as u64;
                let quiet = listed
                    .iter()
                    .filter(|(daemon, _)| *daemon == f.daemon)
                    .flat_map(|(_, objects)| objects)
                    .any(|o| o.ino == f.ino && o.idle_ms >= grace_ms);
                if quiet {
                    self.peers.call::<()>(f.daemon, &Request::ObjRemove { ino: f.ino })?;
                }
                Ok(quiet)
            }
            FsckClass::Doomed => {
                self.deleter.wake();
                Ok(true)
            }
            FsckClass::StageTemp => {
                self.stage_temps.sweep(|under_way| self.namespace.remove_stage_temps(under_way))?;
                Ok(!self.namespace.audit()?.stage_temps.iter().any(|(temp, _)| *temp == f.path))
            }
            FsckClass::LinkCount => match audit.files.get(&f.ino) {
                Some(file) => self.namespace.fix_link_count(f.ino, &file.names),
                None => self.namespace.drop_unnamed_inode(f.ino),
            },
            FsckClass::YoungOrphan
            | FsckClass::DataLost
            | FsckClass::Untrusted
            | FsckClass::Held
            | FsckClass::Dangling => Ok(false),
        }
    }
}

/// The doomed records, the abandoned stage-out temps and the inode records of no name.
fn check_records(audit: &Audit, stage_temps: &StageTemps, out: &mut Vec<FsckFinding>) {
    for d in &audit.doomed {
        let (class, detail) = match d.held() {
            true => (FsckClass::Held, "removed, kept for a client that has it open".to_string()),
            false => (FsckClass::Doomed, "removed; its objects are still to be deleted".to_string()),
        };
        out.push(finding(class, d.ino, FSCK_NO_DAEMON, String::new(), detail));
    }
    stage_temps.sweep(|under_way| {
        for (temp, ino) in audit.stage_temps.iter().filter(|(temp, _)| !under_way(temp)) {
            let detail = "a stage-out temp no stage-out under way owns".to_string();
            out.push(finding(FsckClass::StageTemp, *ino, FSCK_NO_DAEMON, temp.clone(), detail));
        }
    });
    for &(ino, nlink) in &audit.unnamed {
        let detail = format!("an inode record of no name, link count {nlink}");
        out.push(finding(FsckClass::LinkCount, ino, FSCK_NO_DAEMON, String::new(), detail));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::ClientId;
    use crate::namespace::Doomed;
    use surge_proto::Layout;

    #[test]
    fn held_files_are_notes_due_ones_problems_and_only_abandoned_temps_and_unnamed_inodes_are_found() {
        let layout = Layout { stripe_count: 1, stripe_size: 1 << 20, first: 0 };
        let audit = Audit {
            doomed: vec![
                Doomed { ino: 5, layout, held_until_ns: i64::MAX },
                Doomed { ino: 6, layout, held_until_ns: 0 },
            ],
            stage_temps: vec![("/.a.surge-stage.1".into(), 7), ("/.b.surge-stage.2".into(), 8)],
            unnamed: vec![(9, 2)],
            ..Audit::default()
        };
        let temps = StageTemps::default();
        temps.begin(ClientId { instance: 1, pid: 1 }, || Ok("/.b.surge-stage.2".to_string())).unwrap();
        let mut found = Vec::new();
        check_records(&audit, &temps, &mut found);
        let seen: Vec<(FsckClass, u64, bool)> = found.iter().map(|f| (f.class, f.ino, f.class.is_problem())).collect();
        assert_eq!(
            seen,
            [
                (FsckClass::Held, 5, false),
                (FsckClass::Doomed, 6, true),
                (FsckClass::StageTemp, 7, true),
                (FsckClass::LinkCount, 9, true),
            ]
        );
        assert_eq!(found[2].path, "/.a.surge-stage.1");
    }
}
