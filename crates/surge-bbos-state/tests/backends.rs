//! The shared suite run against each backend, and what only one backend
//! has: the embedded store's durability, Redis's key names and types, and
//! the errors for a Redis that is malformed or not there.

#[macro_use]
mod common;

use common::{Opened, RedisServer};
use surge_bbos_state::{
    AppId, Bytes, DeviceId, DrainState, EmbeddedState, Location, Mtbf, RedisState, StateError, Version,
};

mod embedded {
    drain_state_suite!(crate::common::embedded);
}

mod redis {
    drain_state_suite!(crate::common::redis);
}

#[test]
fn the_embedded_state_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let expected = common::suite::fill(&EmbeddedState::open(dir.path()).unwrap());
    let reopened = EmbeddedState::open(dir.path()).unwrap();
    assert_eq!(reopened.snapshot().unwrap(), expected);
}

#[test]
fn redis_holds_the_keys_of_table_5_1_with_their_types_under_the_cluster_prefix() {
    let Some(Opened { state, server: Some(server), .. }) = common::redis("redis_holds_the_keys_of_table_5_1") else {
        return;
    };
    common::suite::fill(&*state);
    state.record_restart(AppId(1), surge_bbos_state::Restart { at_ms: 5, mtbf: Mtbf(9) }).unwrap();
    let mut con = server.connection();
    let type_of =
        |con: &mut ::redis::Connection, key: &str| -> String { ::redis::cmd("TYPE").arg(key).query(con).unwrap() };
    let expected = [
        ("surge:test:V-order", "zset"),
        ("surge:test:Clean", "list"),
        ("surge:test:app:1:restart", "zset"),
        ("surge:test:app:1:dev:0", "zset"),
        ("surge:test:file:a.1", "string"),
        ("surge:test:app:1:BB", "string"),
        ("surge:test:E-order", "list"),
        ("surge:test:DWSF", "string"),
        ("surge:test:R-order", "list"),
        ("surge:test:DWPP", "string"),
    ];
    for (key, kind) in expected {
        assert_eq!(type_of(&mut con, key), kind, "{key}");
    }
    let get = |con: &mut ::redis::Connection, key: &str| -> String { ::redis::cmd("GET").arg(key).query(con).unwrap() };
    assert_eq!(get(&mut con, "surge:test:file:a.1"), "pfs:/pfs/a.1");
    assert_eq!(get(&mut con, "surge:test:DWPP"), "300");
    let victims: Vec<(String, f64)> =
        ::redis::cmd("ZRANGE").arg("surge:test:V-order").arg(0).arg(-1).arg("WITHSCORES").query(&mut con).unwrap();
    assert_eq!(victims, [("2".to_string(), 60.0), ("1".to_string(), 600.0)]);
}

#[test]
fn two_clusters_share_one_redis_without_seeing_each_other() {
    let Some(server) = surge_testkit::skip_unless_ready("two_clusters_share_one_redis", RedisServer::start()) else {
        return;
    };
    let (one, two) =
        (RedisState::connect(&server.url(), "one").unwrap(), RedisState::connect(&server.url(), "two").unwrap());
    let expected = common::suite::fill(&one);
    two.add_checkpoint(AppId(1), DeviceId(0), Version(9), "two.9").unwrap();
    two.add_written(Bytes(1)).unwrap();
    assert_eq!(one.snapshot().unwrap(), expected);
    assert_eq!(one.pop_oldest_version(AppId(1), DeviceId(0)).unwrap().unwrap().0, Version(1));
    assert_eq!(two.pop_oldest_version(AppId(1), DeviceId(0)).unwrap().unwrap().0, Version(9));
    assert_eq!(two.written_so_far().unwrap(), Bytes(1));
    assert_eq!(two.location("a.1").unwrap(), None::<Location>);
}

#[test]
fn demoters_on_separate_redis_connections_get_each_version_once_and_no_write_is_lost() {
    let Some(server) = surge_testkit::skip_unless_ready("demoters_on_separate_redis_connections", RedisServer::start())
    else {
        return;
    };
    let demoters: Vec<RedisState> = (0..4).map(|_| RedisState::connect(&server.url(), "test").unwrap()).collect();
    let (app, device) = (AppId(1), DeviceId(0));
    for version in 1..=40 {
        demoters[0].add_checkpoint(app, device, Version(version), &format!("a.{version}")).unwrap();
    }
    let throttler = RedisState::connect(&server.url(), "test").unwrap();
    let (mut popped, periods) = std::thread::scope(|scope| {
        let periods = scope.spawn(|| (0..20).map(|_| throttler.end_period().unwrap().0).sum::<u64>());
        let threads: Vec<_> = demoters
            .iter()
            .map(|demoter| {
                scope.spawn(move || {
                    std::iter::from_fn(|| demoter.pop_oldest_version(app, device).unwrap())
                        .map(|(version, _)| {
                            demoter.add_written(Bytes(1)).unwrap();
                            version
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let popped: Vec<Version> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();
        (popped, periods.join().unwrap())
    });
    popped.sort();
    assert_eq!(popped, (1..=40).map(Version).collect::<Vec<_>>());
    assert_eq!(periods + throttler.written_so_far().unwrap().0, 40, "a write counted in no period, or in two");
}

#[test]
fn a_malformed_redis_url_is_refused_naming_it() {
    for url in ["127.0.0.1:6379", "redis://", "http://127.0.0.1:6379"] {
        let Err(error) = RedisState::connect(url, "test") else { panic!("{url} was taken") };
        assert!(matches!(error, StateError::BadRedisUrl { .. }), "{url}: {error:?}");
        let message = error.to_string();
        assert!(message.contains(url) && message.contains("redis://HOST:PORT"), "{message}");
    }
}

#[test]
fn a_redis_that_is_not_there_is_reported_with_its_address_and_what_to_do() {
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    let Err(error) = RedisState::connect(&url, "test") else { panic!("nothing listens on {url}") };
    let message = error.to_string();
    assert!(matches!(error, StateError::Redis { .. }), "{error:?}");
    assert!(
        message.contains(&url) && message.contains("redis-server") && message.contains("--drain-state"),
        "{message}"
    );
}

#[test]
fn an_embedded_store_that_cannot_be_opened_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let Err(error) = EmbeddedState::open(&missing) else { panic!("opened a store in a missing directory") };
    let message = error.to_string();
    assert!(matches!(error, StateError::Embedded { op: "open", .. }), "{error:?}");
    assert!(message.contains(&missing.join(surge_bbos_state::embedded::FILE_NAME).display().to_string()), "{message}");
}
