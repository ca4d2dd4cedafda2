"""DCA-IO procedures ([DCA-IO], docs/references.md) against hand-worked examples (its Fig. 6, and our own)."""

import os
import subprocess
import sys

from profiles import posix_file, process, write_profile

from surge_tune.dcaio import procedures as P
from surge_tune.dcaio.history import History, Run
from surge_tune.dcaio.loads import parse_loads

MIB = 1 << 20


def run(count, size=MIB, thr=100.0, nprocs=1, app="a", shared=False, io_procs=1):
    return Run(
        app=app,
        nprocs=nprocs,
        stripe_count=count,
        stripe_size=size,
        throughput_mib_s=thr,
        shared_file=shared,
        num_io_procs=io_procs,
    )


def test_initial_execution_fig6_picks_the_best_mean_count():
    # Fig. 6: NumProcs = 1, counts {1, 8, 16, 32, 64, 128}; 128 has the highest average -> 128.
    history = [
        run(c, thr=t) for c, t in [(1, 50), (1, 70), (8, 200), (16, 300), (32, 350), (64, 400), (128, 500), (128, 460)]
    ]
    history += [run(4, thr=9999, nprocs=64)]  # another process count must not count
    layout = P.initial_execution(history, nprocs=1, max_targets=256)
    assert (layout.stripe_count, layout.stripe_size, layout.phase) == (128, MIB, "initial")


def test_initial_execution_compares_throughputs_not_the_typo():
    # Printed line 16 compares throughput with stripeCount: it would end on the last group (8).
    history = [run(1, thr=500), run(8, thr=300), run(1, size=4 * MIB, thr=100), run(8, size=4 * MIB, thr=100)]
    layout = P.initial_execution(history, nprocs=1, max_targets=256)
    assert layout.stripe_count == 1  # mean 300 vs 200
    assert layout.stripe_size == MIB  # mean 400 (1M) vs 100 (4M)


def test_initial_execution_fallbacks_and_clamp():
    assert (P.initial_execution([], 8, 4).stripe_count, P.initial_execution([], 8, 4).phase) == (1, "default")
    near = P.initial_execution([run(16, nprocs=4, thr=10), run(2, nprocs=4, thr=5), run(1, nprocs=64)], 6, 8)
    assert near.stripe_count == 8 and "nearest count 4" in near.reason  # 16 clamped to the 8 targets


def test_rule_based_second_run():
    fpp = P.rule_based(run(4, size=8 * MIB), max_targets=4)
    assert (fpp.stripe_count, fpp.stripe_size) == (1, MIB)
    shared = P.rule_based(run(1, shared=True, io_procs=16, nprocs=16), max_targets=4)
    assert (shared.stripe_count, shared.stripe_size) == (4, MIB)  # numIOProcs, capped


def test_heuristic_walks_count_then_size_then_stays():
    runs = [run(1, thr=80), run(1, thr=100)]  # run 1 (initial), run 2 (rule-based, FPP)
    assert (P.heuristic(runs, 8).stripe_count, P.heuristic(runs, 8).phase) == (2, "heuristic-count")
    runs.append(run(2, thr=150))
    assert P.heuristic(runs, 8).stripe_count == 4
    runs.append(run(4, thr=140))  # worse: freeze the count at the best (2), try a 2 MiB stripe
    layout = P.heuristic(runs, 8)
    assert (layout.stripe_count, layout.stripe_size, layout.phase) == (2, 2 * MIB, "heuristic-size")
    runs.append(run(2, 2 * MIB, thr=170))
    assert (P.heuristic(runs, 8).stripe_count, P.heuristic(runs, 8).stripe_size) == (2, 4 * MIB)
    runs.append(run(2, 4 * MIB, thr=160))  # worse: keep the best
    layout = P.heuristic(runs, 8)
    assert (layout.stripe_count, layout.stripe_size, layout.phase) == (2, 2 * MIB, "stable")
    runs.append(run(2, 2 * MIB, thr=168))
    assert (P.heuristic(runs, 8).stripe_count, P.heuristic(runs, 8).stripe_size) == (2, 2 * MIB)


def test_heuristic_count_capped_then_size():
    runs = [run(2, thr=100), run(4, thr=150)]  # improved, but 4 = all targets
    layout = P.heuristic(runs, 4)
    assert (layout.stripe_count, layout.stripe_size, layout.phase) == (4, 2 * MIB, "heuristic-size")


def targets(states, free=None):
    return [
        P.Target(i, 0.9 if s == "B" else 0.0, (free or [100] * len(states))[i], s == "B") for i, s in enumerate(states)
    ]


def test_interference_non_overlapping_partial_and_capacity():
    base = P.Layout(2, MIB, "rule-based", "")
    nonover = P.interference_adjust(base, targets("BBFF"))
    assert (nonover.start_target, nonover.targets, nonover.phase) == (2, [2, 3], "rule-based+non-overlapping")
    partial = P.interference_adjust(base, targets("BFBB"))
    assert partial.phase.endswith("partial-overlap") and 1 in partial.targets and partial.stripe_count == 2
    cap = P.interference_adjust(base, targets("BBBB", free=[10, 50, 40, 5]))
    assert cap.phase.endswith("capacity") and cap.start_target == 1  # most free space


def test_interference_shrinks_only_when_history_says_it_pays():
    four = P.Layout(4, MIB, "stable", "")
    gcrm = [run(2, thr=95), run(4, thr=100)]  # two stripes reach 95% of four: use the two free targets
    shrunk = P.interference_adjust(four, targets("BBFF"), gcrm)
    assert (shrunk.stripe_count, shrunk.targets) == (2, [2, 3])
    vpic = [run(2, thr=50), run(4, thr=100)]  # VPIC gains from all four: keep them, overlapping
    kept = P.interference_adjust(four, targets("BBFF"), vpic)
    assert kept.stripe_count == 4 and kept.phase.endswith("partial-overlap")


def test_loads_from_surge_status_toml():
    text = """cluster_id = "c"\npfs = "/pfs"\n
[[daemon]]\nindex = 0\nstate = "up"\nconnections = 3\nbytes_used = 10\ncapacity = 100\n
[[daemon]]\nindex = 1\nstate = "up"\nconnections = 1\nbytes_used = 10\ncapacity = 100\n
[[daemon]]\nindex = 2\nstate = "down"\nerror = "refused"\nconnections = 0\n"""
    t = parse_loads(text, "status")
    assert [x.busy for x in t] == [True, False, True]


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "surge_tune", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_record_layout_apply_end_to_end(tmp_path):
    db = str(tmp_path / "h.db")
    for i, (count, secs) in enumerate([(1, 2.0), (1, 1.6)]):
        procs = [
            process(
                r,
                4,
                [posix_file("/surge/ckpt/shared", writes=100, xfer=4 * MIB, write_time=secs, stripe_count=count)],
                exe="/apps/vpic",
            )
            for r in range(4)
        ]
        p = _cli("--db", db, "record", write_profile(tmp_path / f"run{i}.jsonl", procs))
        assert p.returncode == 0, p.stderr
    fake = tmp_path / "surge"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n')
    fake.chmod(0o755)
    loads = tmp_path / "loads.toml"
    loads.write_text(
        "".join(
            f"[[target]]\nindex = {i}\nload = {load}\nfree_bytes = 100\n"
            for i, load in enumerate([0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        )
    )
    p = _cli(
        "--db", db, "layout", "vpic", "--loads", str(loads), "--apply", "/surge/ckpt", env={"SURGE_BIN": str(fake)}
    )
    assert p.returncode == 0, p.stderr
    # run 3, throughput rose on run 2 at count 1: double to 2, placed on the first free window (1, 2)
    assert (tmp_path / "args").read_text().split() == ["setstripe", "-c", "2", "-S", "1M", "-i", "1", "/surge/ckpt"]
    p = _cli("--db", db, "layout", "nosuchapp")
    assert p.returncode != 0 and "unknown application 'nosuchapp'" in p.stderr and "vpic" in p.stderr
    p = _cli("--db", db, "layout", "vpic", "--no-interference", "--apply", "/x", env={"SURGE_BIN": "/nonexistent"})
    assert p.returncode != 0 and "surge binary was not found" in p.stderr
    with History(db) as h:
        assert len(h.runs("vpic")) == 2  # nothing lost by the failures


def test_read_and_write_runs_of_one_app_are_never_compared(tmp_path):
    from surge_tune.dcaio.engine import decide_layout

    def recorded(direction, count, thr):
        r = run(count, thr=thr, app="ior")
        r.direction = direction
        return r

    with History(str(tmp_path / "h.db")) as h:
        # write runs: count 1 -> 2 improved; a read run in between is far faster and must not break the walk
        for r in (recorded("write", 1, 100.0), recorded("read", 2, 5000.0), recorded("write", 2, 150.0)):
            h.add(r)
        write = decide_layout(h, "ior", max_targets=8, direction="write")
        assert (write.direction, write.run_number, write.layout.stripe_count) == ("write", 3, 4)
        read = decide_layout(h, "ior", max_targets=8, direction="read")
        assert read.run_number == 2 and read.layout.phase == "rule-based"
        assert decide_layout(h, "ior", max_targets=8).direction == "write"  # the last run's direction


def test_a_history_from_before_the_direction_column_is_upgraded(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.db")
    with History(path) as h:
        h.add(run(2, app="old"))
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE runs DROP COLUMN direction")
    db.commit()
    db.close()
    with History(path) as h:
        assert [r.direction for r in h.runs("old")] == ["write"]


def test_recorded_runs_know_their_direction(tmp_path):
    from surge_tune.dcaio.history import run_from_summary
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job

    reader = [process(0, 1, [posix_file("/d/in", reads=100, xfer=MIB, read_time=1.0)])]
    s = summarize(read_job(write_profile(tmp_path / "r.jsonl", reader)))
    assert run_from_summary(s).direction == "read"
