//! The failover against a real `redis-server` that dies, is not there, is
//! misnamed, or comes back empty: every change must still be found in the
//! embedded store, and every switch reported.

mod common;

use common::RedisServer;
use std::path::Path;
use std::sync::{Arc, Mutex};
use surge_bbos_state::server::redacted;
use surge_bbos_state::{
    AppId, Bytes, DeviceId, DrainState, EmbeddedState, FailoverState, Location, Mtbf, RedisState, Serving, StateError,
    Version,
};

/// A failover whose switch reports are kept for the test to read.
fn open(url: &str, dir: &Path) -> (Result<FailoverState, StateError>, Arc<Mutex<Vec<String>>>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let kept = reports.clone();
    let failover = FailoverState::open(url, "test", dir, Box::new(move |e| kept.lock().unwrap().push(e.to_string())));
    (failover, reports)
}

/// Step `i` of a job's checkpointing and draining (Algorithms 5.1 and 5.2
/// of [Sung20, ch. 5]), on `state`.
fn step(state: &dyn DrainState, i: u64) {
    let (app, device) = (AppId(i % 3), DeviceId((i % 2) as u32));
    let file = format!("/job{}/ckpt.{i}", app.0);
    if state.is_in_buffer(app).unwrap() {
        state.push_evict(app).unwrap();
    }
    state.add_checkpoint(app, device, Version(i), &file).unwrap();
    state.set_location(&file, &Location::buffer(&format!("/bb/{}{file}", device.0))).unwrap();
    state.set_in_buffer(app, true).unwrap();
    state.add_victim(app, Mtbf(600 * (app.0 + 1))).unwrap();
    state.add_written(Bytes(1 << 20)).unwrap();
    if i % 4 == 3 {
        // A demoter: old versions first, else the coldest victim.
        let victim = state.pop_evict().unwrap().or_else(|| state.pop_victim().unwrap().map(|(app, _)| app));
        let victim = victim.expect("there is always something to demote here");
        for device in [DeviceId(0), DeviceId(1)] {
            for file in state.pop_oldest_version(victim, device).unwrap().map(|(_, files)| files).unwrap_or_default() {
                state.set_location(&file, &Location::pfs(&format!("/pfs{file}"))).unwrap();
                state.push_replication(&file).unwrap();
            }
        }
        state.push_clean(victim).unwrap();
    }
    if i % 10 == 9 {
        state.end_period().unwrap();
    }
}

#[test]
fn a_redis_killed_mid_job_is_reported_and_the_embedded_store_carries_on_with_every_file() {
    let Some(mut server) = surge_testkit::skip_unless_ready("a_redis_killed_mid_job", RedisServer::start()) else {
        return;
    };
    let (dir, reference_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (failover, reports) = open(&server.url(), dir.path());
    let failover = failover.unwrap();
    let reference = EmbeddedState::open(reference_dir.path()).unwrap();
    assert_eq!(failover.serving(), Serving::Redis(redacted(&server.url())));
    for i in 0..20 {
        step(&failover, i);
        step(&reference, i);
    }
    let in_redis = RedisState::connect(&server.url(), "test").unwrap().snapshot().unwrap();
    assert_eq!(in_redis, reference.snapshot().unwrap(), "Redis holds the state while it runs");
    assert!(reports.lock().unwrap().is_empty());

    server.kill();
    for i in 20..40 {
        step(&failover, i);
        step(&reference, i);
    }
    assert_eq!(failover.serving(), Serving::Embedded);
    let reports = reports.lock().unwrap().clone();
    assert_eq!(reports.len(), 1, "one switch, reported once: {reports:?}");
    assert!(reports[0].contains(&redacted(&server.url())) && reports[0].contains("redis-server"), "{}", reports[0]);
    let expected = reference.snapshot().unwrap();
    assert_eq!(failover.snapshot().unwrap(), expected);
    drop(failover);
    assert_eq!(EmbeddedState::open(dir.path()).unwrap().snapshot().unwrap(), expected, "and it is on disk");
}

#[test]
fn a_redis_not_there_at_start_is_reported_and_the_embedded_store_serves() {
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    let dir = tempfile::tempdir().unwrap();
    let (failover, reports) = open(&url, dir.path());
    let failover = failover.unwrap();
    assert_eq!(failover.serving(), Serving::Embedded);
    let reports = reports.lock().unwrap().clone();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].contains(&url) && reports[0].contains("--drain-state"), "{}", reports[0]);
    step(&failover, 0);
    assert_eq!(failover.location("/job0/ckpt.0").unwrap(), Some(Location::buffer("/bb/0/job0/ckpt.0")));
}

#[test]
fn a_malformed_redis_url_is_refused_before_anything_is_switched() {
    let dir = tempfile::tempdir().unwrap();
    let (failover, reports) = open("127.0.0.1:6379", dir.path());
    let Err(error) = failover else { panic!("a URL without a scheme was taken") };
    assert!(matches!(error, StateError::BadRedisUrl { .. }), "{error:?}");
    assert!(error.to_string().contains("redis://HOST:PORT"), "{error}");
    assert!(reports.lock().unwrap().is_empty());
}

#[test]
fn a_redis_gets_the_embedded_state_at_open_and_loses_its_stale_keys() {
    let Some(server) = surge_testkit::skip_unless_ready("a_redis_gets_the_embedded_state", RedisServer::start()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let expected = common::suite::fill(&EmbeddedState::open(dir.path()).unwrap());
    let stale = RedisState::connect(&server.url(), "test").unwrap();
    stale.set_location("/stale", &Location::pfs("/pfs/stale")).unwrap();
    stale.add_written(Bytes(999)).unwrap();
    let other = RedisState::connect(&server.url(), "other").unwrap();
    other.push_clean(AppId(5)).unwrap();

    let (failover, reports) = open(&server.url(), dir.path());
    assert_eq!(failover.unwrap().serving(), Serving::Redis(redacted(&server.url())));
    assert!(reports.lock().unwrap().is_empty());
    assert_eq!(stale.snapshot().unwrap(), expected);
    assert_eq!(other.pop_clean().unwrap(), Some(AppId(5)), "another cluster's keys stay");
}

#[test]
fn a_redis_that_comes_back_empty_is_given_up_and_the_answer_comes_from_the_embedded_store() {
    let Some(server) = surge_testkit::skip_unless_ready("a_redis_that_comes_back_empty", RedisServer::start()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (failover, reports) = open(&server.url(), dir.path());
    let failover = failover.unwrap();
    failover.add_victim(AppId(1), Mtbf(60)).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut server.connection()).unwrap();
    assert_eq!(failover.pop_victim().unwrap(), Some((AppId(1), Mtbf(60))));
    assert_eq!(failover.serving(), Serving::Embedded);
    let reports = reports.lock().unwrap().clone();
    assert!(reports.len() == 1 && reports[0].contains("disagree on pop_victim"), "{reports:?}");
}
