//! The suite every [`DrainState`] backend passes: one function per
//! behaviour, instantiated as tests by `drain_state_suite!(open)`, where
//! `open(test_name)` gives an [`super::Opened`] store (or `None` to skip).

use surge_bbos_state::{AppId, Bytes, Calibration, DeviceId, DrainState, Location, Mtbf, Restart, Snapshot, Version};

macro_rules! drain_state_suite {
    ($open:path) => {
        drain_state_suite!($open;
            victims_come_out_highest_mtbf_first_once_each,
            clean_and_evict_lists_are_first_in_first_out,
            r_order_keeps_a_file_listed_once_until_it_is_removed,
            restarts_are_kept_per_application_oldest_first,
            the_oldest_checkpoint_version_pops_with_all_its_files_per_device,
            a_file_added_again_moves_to_its_new_version,
            a_location_follows_a_file_from_buffer_to_pfs,
            the_in_buffer_flag_is_set_and_cleared_per_application,
            dwsf_adds_up_and_the_end_of_a_period_moves_it_to_dwpp,
            a_snapshot_holds_all_ten_keys,
            a_forgotten_file_leaves_its_version_and_location,
            the_calibration_is_kept_and_read_back,
            concurrent_demoters_get_each_version_once,
        );
    };
    ($open:path; $($test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                if let Some(opened) = $open(stringify!($test)) {
                    crate::common::suite::$test(&*opened.state);
                }
            }
        )*
    };
}

const A: AppId = AppId(1);
const B: AppId = AppId(2);
const C: AppId = AppId(3);
const DEV0: DeviceId = DeviceId(0);
const DEV1: DeviceId = DeviceId(1);

pub fn victims_come_out_highest_mtbf_first_once_each(state: &dyn DrainState) {
    assert_eq!(state.pop_victim().unwrap(), None);
    state.add_victim(A, Mtbf(600)).unwrap();
    state.add_victim(B, Mtbf(3000)).unwrap();
    state.add_victim(C, Mtbf(60)).unwrap();
    // A victim recorded again keeps one entry, with its new MTBF.
    state.add_victim(A, Mtbf(6000)).unwrap();
    let popped: Vec<_> = std::iter::from_fn(|| state.pop_victim().unwrap()).collect();
    assert_eq!(popped, [(A, Mtbf(6000)), (B, Mtbf(3000)), (C, Mtbf(60))]);
}

pub fn clean_and_evict_lists_are_first_in_first_out(state: &dyn DrainState) {
    assert_eq!((state.pop_clean().unwrap(), state.pop_evict().unwrap()), (None, None));
    for app in [B, A, B] {
        state.push_clean(app).unwrap();
        state.push_evict(AppId(app.0 + 10)).unwrap();
    }
    assert_eq!(std::iter::from_fn(|| state.pop_clean().unwrap()).collect::<Vec<_>>(), [B, A, B]);
    assert_eq!(
        std::iter::from_fn(|| state.pop_evict().unwrap()).collect::<Vec<_>>(),
        [AppId(12), AppId(11), AppId(12)]
    );
    // An emptied list takes entries again, after the ones before.
    state.push_clean(C).unwrap();
    assert_eq!(state.pop_clean().unwrap(), Some(C));
}

pub fn r_order_keeps_a_file_listed_once_until_it_is_removed(state: &dyn DrainState) {
    assert_eq!(state.next_replication().unwrap(), None);
    for file in ["/ckpt/b", "/ckpt/a", "/ckpt/c", "/ckpt/b"] {
        state.push_replication(file).unwrap();
    }
    let listed = || {
        let listed = state.replications().unwrap();
        assert_eq!(listed, state.snapshot().unwrap().replicate_order);
        listed
    };
    assert_eq!(listed(), ["/ckpt/a", "/ckpt/c", "/ckpt/b"], "pushed again: moved to the tail, listed once");
    // The head comes out and goes to the tail: still listed until removed.
    assert_eq!(state.next_replication().unwrap().as_deref(), Some("/ckpt/a"));
    assert_eq!(listed(), ["/ckpt/c", "/ckpt/b", "/ckpt/a"]);
    state.remove_replication("/ckpt/b").unwrap();
    state.remove_replication("/ckpt/none").unwrap();
    assert_eq!(listed(), ["/ckpt/c", "/ckpt/a"]);
    assert_eq!(state.next_replication().unwrap().as_deref(), Some("/ckpt/c"));
    assert_eq!(state.next_replication().unwrap().as_deref(), Some("/ckpt/a"));
    for file in ["/ckpt/c", "/ckpt/a"] {
        state.remove_replication(file).unwrap();
    }
    assert_eq!(state.next_replication().unwrap(), None);
    // A single entry rotates onto itself.
    state.push_replication("/ckpt/d").unwrap();
    assert_eq!(state.next_replication().unwrap().as_deref(), Some("/ckpt/d"));
    assert_eq!(listed(), ["/ckpt/d"]);
}

pub fn restarts_are_kept_per_application_oldest_first(state: &dyn DrainState) {
    assert_eq!(state.restarts(A).unwrap(), []);
    let (late, early) = (Restart { at_ms: 2_000, mtbf: Mtbf(60) }, Restart { at_ms: 1_000, mtbf: Mtbf(900) });
    state.record_restart(A, late).unwrap();
    state.record_restart(A, early).unwrap();
    state.record_restart(B, late).unwrap();
    assert_eq!(state.restarts(A).unwrap(), [early, late]);
    assert_eq!(state.restarts(B).unwrap(), [late]);
}

pub fn the_oldest_checkpoint_version_pops_with_all_its_files_per_device(state: &dyn DrainState) {
    state.add_checkpoint(A, DEV0, Version(2), "a.v2").unwrap();
    state.add_checkpoint(A, DEV0, Version(1), "a.v1.r1").unwrap();
    state.add_checkpoint(A, DEV0, Version(1), "a.v1.r0").unwrap();
    state.add_checkpoint(A, DEV1, Version(1), "a.v1.dev1").unwrap();
    state.add_checkpoint(B, DEV0, Version(1), "b.v1").unwrap();
    let v1 = vec!["a.v1.r0".to_string(), "a.v1.r1".to_string()];
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), Some((Version(1), v1)));
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), Some((Version(2), vec!["a.v2".to_string()])));
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), None);
    assert_eq!(state.pop_oldest_version(A, DEV1).unwrap(), Some((Version(1), vec!["a.v1.dev1".to_string()])));
    assert_eq!(state.pop_oldest_version(B, DEV0).unwrap(), Some((Version(1), vec!["b.v1".to_string()])));
    assert_eq!(state.pop_oldest_version(C, DEV0).unwrap(), None);
}

pub fn a_file_added_again_moves_to_its_new_version(state: &dyn DrainState) {
    state.add_checkpoint(A, DEV0, Version(1), "a.ckpt").unwrap();
    state.add_checkpoint(A, DEV0, Version(3), "a.ckpt").unwrap();
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), Some((Version(3), vec!["a.ckpt".to_string()])));
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), None);
}

pub fn a_location_follows_a_file_from_buffer_to_pfs(state: &dyn DrainState) {
    assert_eq!(state.location("/job/ckpt.1").unwrap(), None);
    state.set_location("/job/ckpt.1", &Location::buffer("/bb/dev0/job/ckpt.1")).unwrap();
    assert_eq!(state.location("/job/ckpt.1").unwrap(), Some(Location::buffer("/bb/dev0/job/ckpt.1")));
    state.set_location("/job/ckpt.1", &Location::pfs("/pfs/job/ckpt.1")).unwrap();
    assert_eq!(state.location("/job/ckpt.1").unwrap(), Some(Location::pfs("/pfs/job/ckpt.1")));
    // A file named like another key stays a file.
    state.set_location("DWSF", &Location::pfs("/pfs/DWSF")).unwrap();
    assert_eq!(state.written_so_far().unwrap(), Bytes(0));
}

pub fn the_in_buffer_flag_is_set_and_cleared_per_application(state: &dyn DrainState) {
    assert!(!state.is_in_buffer(A).unwrap());
    state.set_in_buffer(A, true).unwrap();
    state.set_in_buffer(A, true).unwrap();
    assert!(state.is_in_buffer(A).unwrap());
    assert!(!state.is_in_buffer(B).unwrap());
    state.set_in_buffer(A, false).unwrap();
    state.set_in_buffer(B, false).unwrap();
    assert!(!state.is_in_buffer(A).unwrap());
}

pub fn dwsf_adds_up_and_the_end_of_a_period_moves_it_to_dwpp(state: &dyn DrainState) {
    assert_eq!((state.written_so_far().unwrap(), state.last_period().unwrap()), (Bytes(0), Bytes(0)));
    assert_eq!(state.add_written(Bytes(80 << 20)).unwrap(), Bytes(80 << 20));
    assert_eq!(state.add_written(Bytes(5 << 30)).unwrap(), Bytes((5 << 30) + (80 << 20)));
    assert_eq!(state.end_period().unwrap(), Bytes((5 << 30) + (80 << 20)));
    assert_eq!(state.written_so_far().unwrap(), Bytes(0));
    assert_eq!(state.last_period().unwrap(), Bytes((5 << 30) + (80 << 20)));
    state.add_written(Bytes(7)).unwrap();
    assert_eq!(state.end_period().unwrap(), Bytes(7));
    assert_eq!(state.last_period().unwrap(), Bytes(7));
}

/// Puts something in every key; returns what a snapshot must show.
pub fn fill(state: &dyn DrainState) -> Snapshot {
    state.add_victim(A, Mtbf(600)).unwrap();
    state.add_victim(B, Mtbf(60)).unwrap();
    state.push_clean(B).unwrap();
    let restart = Restart { at_ms: 1_700_000_000_000, mtbf: Mtbf(500) };
    state.record_restart(B, restart).unwrap();
    state.add_checkpoint(A, DEV0, Version(1), "a.1").unwrap();
    state.add_checkpoint(A, DEV0, Version(2), "a.2").unwrap();
    state.add_checkpoint(B, DEV1, Version(1), "b.1").unwrap();
    state.set_location("a.1", &Location::pfs("/pfs/a.1")).unwrap();
    state.set_location("a.2", &Location::buffer("/bb/0/a.2")).unwrap();
    state.set_in_buffer(A, true).unwrap();
    state.push_evict(A).unwrap();
    state.add_written(Bytes(300)).unwrap();
    state.end_period().unwrap();
    state.add_written(Bytes(40)).unwrap();
    state.push_replication("a.1").unwrap();
    let calibration = Calibration { write_max: 40_000_000, write_min: 30_000_000, read_max: 16_000_000, read_min: 1 };
    state.set_calibration(&calibration).unwrap();
    Snapshot {
        victims: [(A, Mtbf(600)), (B, Mtbf(60))].into(),
        clean: vec![B],
        restarts: [(B, vec![restart])].into(),
        checkpoints: [
            ((A, DEV0), vec![(Version(1), "a.1".to_string()), (Version(2), "a.2".to_string())]),
            ((B, DEV1), vec![(Version(1), "b.1".to_string())]),
        ]
        .into(),
        locations: [("a.1".to_string(), Location::pfs("/pfs/a.1")), ("a.2".to_string(), Location::buffer("/bb/0/a.2"))]
            .into(),
        in_buffer: [A].into(),
        evict_order: vec![A],
        written_so_far: Bytes(40),
        replicate_order: vec!["a.1".to_string()],
        last_period: Bytes(300),
        calibration: Some(calibration),
    }
}

pub fn a_forgotten_file_leaves_its_version_and_location(state: &dyn DrainState) {
    state.add_checkpoint(A, DEV0, Version(1), "a.1").unwrap();
    state.add_checkpoint(A, DEV0, Version(1), "a.1b").unwrap();
    state.add_checkpoint(A, DEV0, Version(2), "a.2").unwrap();
    state.set_location("a.1", &Location::buffer("a.1")).unwrap();
    state.forget_file(A, DEV0, "a.1").unwrap();
    // Forgetting what is not there is no error.
    state.forget_file(A, DEV1, "a.1").unwrap();
    state.forget_file(B, DEV0, "nothing").unwrap();
    assert_eq!(state.location("a.1").unwrap(), None);
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), Some((Version(1), vec!["a.1b".to_string()])));
    state.forget_file(A, DEV0, "a.2").unwrap();
    assert_eq!(state.pop_oldest_version(A, DEV0).unwrap(), None);
}

pub fn the_calibration_is_kept_and_read_back(state: &dyn DrainState) {
    assert_eq!(state.calibration().unwrap(), None);
    let measured = Calibration { write_max: 900_000_000, write_min: 600_000_000, read_max: 500_000_000, read_min: 80 };
    state.set_calibration(&measured).unwrap();
    state.set_calibration(&Calibration { write_max: 1, ..measured }).unwrap();
    assert_eq!(state.calibration().unwrap(), Some(Calibration { write_max: 1, ..measured }));
}

pub fn a_snapshot_holds_all_ten_keys(state: &dyn DrainState) {
    assert_eq!(state.snapshot().unwrap(), Snapshot::default());
    let expected = fill(state);
    assert_eq!(state.snapshot().unwrap(), expected);
}

pub fn concurrent_demoters_get_each_version_once(state: &dyn DrainState) {
    const VERSIONS: u64 = 40;
    for version in 1..=VERSIONS {
        state.add_checkpoint(A, DEV0, Version(version), &format!("a.{version}")).unwrap();
    }
    let mut popped: Vec<Version> = std::thread::scope(|scope| {
        let demoters: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    std::iter::from_fn(|| state.pop_oldest_version(A, DEV0).unwrap())
                        .map(|(version, files)| {
                            assert_eq!(files, [format!("a.{}", version.0)]);
                            version
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        demoters.into_iter().flat_map(|demoter| demoter.join().unwrap()).collect()
    });
    popped.sort();
    assert_eq!(popped, (1..=VERSIONS).map(Version).collect::<Vec<_>>());
}
