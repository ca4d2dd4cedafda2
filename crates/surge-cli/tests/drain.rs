//! The data manager from the command line: `--drain*` settings on
//! `surge start` and `surge run`, refused before anything starts when
//! they are wrong.

use surge_testkit::cluster::Cluster;

#[test]
fn bad_drain_settings_are_refused_before_any_daemon_starts() {
    let c = Cluster::unstarted();
    let refusals: [(&[&str], &str); 6] = [
        (&["start", "--drain", "fastest"], "possible values: off, bbos, maxeff, maxbw, dedicated"),
        (&["start", "--drain", "bbos", "--drain-state", "redis"], "is for surge run"),
        (&["start", "--drain", "bbos", "--drain-state", "127.0.0.1:6379"], "redis://HOST:PORT"),
        (&["start", "--drain-state", "redis://127.0.0.1:6379"], "add --drain bbos"),
        (&["start", "--drain", "bbos", "--drain-rates", "40,30,16"], "four rates"),
        (&["start", "--drain", "bbos", "--drain-period", "0"], "--drain-period"),
    ];
    for (args, why) in refusals {
        let err = c.fails(args);
        assert!(err.contains(why), "surge {}: {err}", args.join(" "));
    }
    let err = c.fails(&["run", "--drain-rates", "4,3,2,1", "--", "true"]);
    assert!(err.contains("need a drain policy"), "{err}");
    assert!(c.pids().is_empty(), "no daemon was started");
}
