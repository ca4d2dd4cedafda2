//! The group commit task of daemon 0: once per commit interval, makes the
//! namespace's changes of that interval durable with one durable commit
//! (`Namespace::sync`; see `namespace::GroupCommit`). A client's fsync of
//! a file or a directory (`Sync`) does the same at once. Started only with
//! a commit interval above 0 (`--commit-interval`).

use crate::background::{Context, Task};
use crate::failure::Failure;
use crate::namespace::Namespace;
use std::sync::Arc;
use std::time::Duration;

pub struct GroupCommitter {
    pub namespace: Arc<Namespace>,
}

impl Task for GroupCommitter {
    fn name(&self) -> &'static str {
        "group-commit"
    }

    fn period(&self) -> Duration {
        self.namespace.commit_interval()
    }

    fn run_once(&mut self, _cx: &Context) -> Result<(), Failure> {
        self.namespace.sync()
    }
}
