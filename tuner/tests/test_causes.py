"""The diagnoses are right on logs and profiles that used to fool them (issue 16, items 1-3): each test
builds or reads the case that showed a defect and checks the corrected behaviour."""

import os

import pytest
from conftest import SHARED_LOGS, example_logs, needs_public_logs
from profiles import posix_file, process, write_profile

from surge_tune.analyze import analyze
from surge_tune.analyze.base import STD_STREAMS, Thresholds
from surge_tune.features import summarize
from surge_tune.ingest import read_job

MIB = 1 << 20


def run(path, **overrides):
    return analyze(summarize(read_job(str(path))), Thresholds(**overrides))


def finding(analysis, code):
    return next((f for f in analysis.findings if f.code == code), None)


def mpiio(indep=0, coll=0, nbytes=0, small=0, slowest=0, fastest=0):
    """MPI-IO counters for one process's record of a file."""
    return {
        "MPIIO_INDEP_WRITES": indep,
        "MPIIO_COLL_WRITES": coll,
        "MPIIO_BYTES_WRITTEN": nbytes,
        "MPIIO_SIZE_WRITE_AGG_0_100": small,
    }


# -- Darshan's own hints, 1 MiB buckets, layouts --------------------------------------------------------


@needs_public_logs
def test_darshans_own_log_hints_are_not_read_as_the_applications():
    release = os.path.join(SHARED_LOGS, "release_logs", "mpi-io-test-x86_64-3.5.0.darshan")
    job = read_job(release)
    assert not hasattr(job, "hints")  # the log records no application hints
    e3sm = run(os.path.join(SHARED_LOGS, "e3sm_io_heatmaps_and_dxt", "e3sm_io_heatmap_only.darshan"))
    text = " ".join(f.summary + " ".join(x.command for x in f.fixes) for f in e3sm.findings)
    assert "aggregator(s)" not in text
    # the 56-stripe file written by 56 ranks already has the layout the rule would recommend
    assert "-c 56" not in text and finding(e3sm, "shared-file-layout") is None


def test_transfers_of_exactly_one_mib_are_not_small(tmp_path):
    procs = [process(r, 4, [posix_file(f"/d/r{r}", writes=4000, xfer=MIB, write_time=4.0)]) for r in range(4)]
    path = write_profile(tmp_path / "mib.jsonl", procs)
    s = summarize(read_job(path))
    assert s.row["write_100k_1m"] == 16000  # Darshan's 100K_1M bucket includes 1 MiB ...
    assert s.row["small_request_pct"] == 0  # ... so it is not counted as small
    assert finding(run(path), "small-transfers") is None


@needs_public_logs
def test_one_mib_reads_of_a_real_log_are_not_small():
    a = run(os.path.join(SHARED_LOGS, "skew_io", "skew-autobench-ior.darshan"))
    assert finding(a, "small-transfers") is None


# -- independent I/O by bytes -------------------------------------------------------------------------


def _header_plus_collective(n=8):
    """Each rank reads a 512-byte header 200 times independently, then writes 256 MiB collectively."""
    procs = []
    for r in range(n):
        f = posix_file("/d/shared.nc", writes=64, xfer=4 * MIB, write_time=2.0, extra={})
        c = f["counters"]
        c.update(
            {
                "POSIX_READS": 200,
                "POSIX_BYTES_READ": 200 * 512,
                "POSIX_SIZE_READ_100_1K": 200,
                "MPIIO_INDEP_READS": 200,
                "MPIIO_COLL_WRITES": 64,
                "MPIIO_BYTES_WRITTEN": 64 * 4 * MIB,
                "MPIIO_BYTES_READ": 200 * 512,
            }
        )
        procs.append(process(r, n, [f]))
    return procs


def test_header_reads_beside_collective_data_are_not_independent_io(tmp_path):
    path = write_profile(tmp_path / "hdr.jsonl", _header_plus_collective())
    # operations say 200 of 264 per rank are independent and small; bytes say 0.01 %
    assert finding(run(path), "independent-io") is None


def test_a_small_shared_input_file_gets_no_independent_io_finding(tmp_path):
    procs = [
        process(
            r, 8, [posix_file("/d/input.dat", reads=1000, xfer=136, read_time=2.0, extra={"MPIIO_INDEP_READS": 1000})]
        )
        for r in range(8)
    ]
    path = write_profile(tmp_path / "input.jsonl", procs)
    assert finding(run(path), "independent-io") is None


def test_small_independent_writes_to_a_large_shared_file_are_independent_io(tmp_path):
    procs = [
        process(
            r,
            8,
            [
                posix_file(
                    "/d/ckpt/shared",
                    writes=5000,
                    xfer=16 << 10,
                    write_time=3.0,
                    extra={
                        "MPIIO_INDEP_WRITES": 5000,
                        "MPIIO_BYTES_WRITTEN": 5000 * (16 << 10),
                        "MPIIO_SIZE_WRITE_AGG_10K_100K": 5000,
                    },
                )
            ],
        )
        for r in range(8)
    ]
    f = finding(run(write_profile(tmp_path / "indep.jsonl", procs)), "independent-io")
    assert f is not None
    assert "independent MPI-IO calls" in f.summary and "collective buffering would merge" in f.summary
    assert f.evidence["MPIIO_INDEP_OPS"] == 40000


# -- load imbalance: sized by bytes, layer-aware; the aggregator chain ------------------------------------


def test_a_tiny_file_with_a_large_spread_is_not_the_straggler_named(tmp_path):
    procs = []
    for r in range(4):
        tiny = posix_file("/d/tiny.cfg", reads=1, xfer=544, read_time=3.0 if r == 0 else 0.01)
        big = posix_file("/d/data", writes=500, xfer=4 * MIB, write_time=5.0 if r == 0 else 2.0)
        procs.append(process(r, 4, [tiny, big]))
    f = finding(run(write_profile(tmp_path / "tiny.jsonl", procs)), "straggler")
    assert f is not None and f.evidence.get("file") == "/d/data"


SUITE = os.path.join(os.path.dirname(__file__), "fixtures", "accuracy")  # profiles of `bench accuracy` runs


@pytest.mark.parametrize("workload", ["clean-fpp", "clean-shared", "random"])
def test_ranks_moving_equal_bytes_with_a_noise_spread_are_neither_imbalance_nor_straggler(workload):
    """4 ranks and 4 daemons on 2 cores: ranks moving 32 MiB each spread 23-34% over 0.2-0.4 s of I/O."""
    a = run(os.path.join(SUITE, f"{workload}.jsonl"))
    spread = a.summary.ranks[a.summary.ranks["rank"] < 4]  # the MPI ranks, not the shell that made DIR
    assert spread["bytes"].nunique() == 1 and spread["io_time"].max() > 1.2 * spread["io_time"].mean()
    assert not {"load-imbalance", "straggler"} & {f.code for f in a.findings}


def test_the_same_spread_over_seconds_is_a_straggler_not_an_imbalance(tmp_path):
    procs = [process(r, 4, [posix_file(f"/d/r{r}", writes=512, write_time=6.0 if r == 2 else 4.0)]) for r in range(4)]
    a = run(write_profile(tmp_path / "slow.jsonl", procs))
    f = finding(a, "straggler")
    assert finding(a, "load-imbalance") is None and f is not None and f.evidence["slowest_rank"] == 2
    assert f.saves_seconds == pytest.approx(6.01 - 4.51, abs=0.01)  # the slow rank finishing at the mean
    assert not any("decomposition" in x.command for x in f.fixes)
    # ... but not below straggler_min_seconds, nor when the run's noise is all there is
    assert finding(run(write_profile(tmp_path / "slow.jsonl", procs), straggler_min_seconds=2.0), "straggler") is None


def test_one_rank_writing_everything_is_still_the_first_finding():
    a = run(os.path.join(SUITE, "one-rank.jsonl"))  # healthy (0.19 s of I/O), so INFO, but first
    assert a.findings[0].code == "load-imbalance" and "data decomposition is uneven" in a.findings[0].summary
    # 3 of 4 ranks idle: rebalanced at rank 0's rate, the phase takes a quarter of its time
    assert a.findings[0].gain_fraction == pytest.approx(0.75, abs=0.01)


def test_the_rebalancing_gain_is_what_the_bytes_explain(tmp_path):
    """Rank 3 moves twice the mean bytes at the others' rate: rebalanced, it would take the others' time."""
    procs = [
        process(r, 4, [posix_file(f"/d/r{r}", writes=5 * 512 if r == 3 else 512, write_time=10.0 if r == 3 else 2.0)])
        for r in range(4)
    ]
    f = finding(run(write_profile(tmp_path / "p.jsonl", procs)), "load-imbalance")
    # mean bytes = 2 x 512 MiB; rank 3's rate 256 MiB/s -> 4 s instead of 10 s; the others' 2 s do 1024 MiB in 4 s
    assert f.evidence["rebalanced_saving_s"] == pytest.approx(6.0, abs=0.02)
    assert finding(run(write_profile(tmp_path / "p.jsonl", procs)), "straggler") is None


def test_a_public_log_with_one_rank_writing_a_shared_file_is_still_an_imbalance():
    noposix = next(p for p in example_logs() if p.endswith("noposix.darshan"))
    f = finding(run(noposix), "load-imbalance")  # 512 ranks; one writes all 29.6 MB of the STDIO file
    assert f is not None and f.evidence["SLOWEST_RANK_BYTES"] == 29562779 and f.evidence["FASTEST_RANK_BYTES"] == 0
    assert f.saves_seconds == pytest.approx(5.28 * (1 - 1 / 512), abs=0.01)


def _aggregated_on_one_stripe(n=8, xfer=4 * MIB, writes=256, stripe_count=1):
    """Collective writes, equal MPI-IO bytes per rank, but rank 0 (the only aggregator) does all POSIX writes."""
    total = n * writes * xfer
    procs = []
    for r in range(n):
        f = posix_file(
            "/d/out/shared.h5",
            writes=n * writes if r == 0 else 0,
            xfer=xfer,
            write_time=8.0 if r == 0 else 0.0,
            stripe_count=stripe_count,
        )
        f["counters"].update({"MPIIO_COLL_WRITES": writes, "MPIIO_BYTES_WRITTEN": writes * xfer})
        f["fcounters"]["MPIIO_F_WRITE_TIME"] = 8.0
        procs.append(process(r, n, [f]))
    return procs, total


def test_one_stripe_one_aggregator_one_posix_writer_is_stated_as_one_chain(tmp_path):
    procs, total = _aggregated_on_one_stripe()
    a = run(write_profile(tmp_path / "agg.jsonl", procs))
    f = finding(a, "few-aggregators")
    assert f is not None and a.findings[0] is f
    assert (
        "on 1 stripe(s), so collective buffering picks 1 aggregator(s), so 1 of 8 ranks do all the POSIX I/O"
        in f.summary
    )
    assert f.evidence["POSIX_SLOWEST_RANK_BYTES"] == total and f.evidence["POSIX_FASTEST_RANK_BYTES"] == 0
    assert f.evidence["MPIIO_SLOWEST_RANK_BYTES"] == f.evidence["MPIIO_FASTEST_RANK_BYTES"]
    assert "surge setstripe -c 8 -S 1M /d/out" in [x.command for x in f.fixes]
    # the imbalance is collective buffering's, not the decomposition's: no "balance the data decomposition"
    assert finding(a, "load-imbalance") is None
    assert not any("decomposition" in x.command for g in a.findings for x in g.fixes)


def test_one_aggregator_on_a_file_of_many_stripes_is_not_the_layouts_doing(tmp_path):
    """One aggregator per node is MPI-IO's default: on 8 stripes the layout did not cap it, and the layout
    fix (8 stripes) would be the layout the file already has."""
    procs, _ = _aggregated_on_one_stripe(stripe_count=8)
    assert finding(run(write_profile(tmp_path / "agg.jsonl", procs)), "few-aggregators") is None


def test_collective_and_independent_mpi_io_recorded_by_the_interposer_are_told_apart():
    """Real profiles (`bench accuracy` runs, release build): 4 ranks write 64 KiB blocks of one shared file,
    interleaved, with MPI_File_write_at_all (clean-collective) or MPI_File_write_at (independent)."""
    collective = run(os.path.join(SUITE, "clean-collective.jsonl"))
    shared = collective.summary.files[collective.summary.files["shared"]].iloc[0]
    assert (shared["mpiio_coll_ops"], shared["mpiio_indep_ops"]) == (2048, 0)
    assert collective.findings == []  # one aggregator on one node: neither imbalance nor a stripe cap
    independent = run(os.path.join(SUITE, "independent.jsonl"))
    top = independent.findings[0]
    assert top.code == "independent-io"
    assert (top.evidence["MPIIO_INDEP_OPS"], top.evidence["MPIIO_COLL_OPS"]) == (2048, 0)


@needs_public_logs
def test_the_aggregator_chain_is_found_in_a_production_log():
    f = finding(run(os.path.join(SHARED_LOGS, "skew_io", "skew-app.darshan")), "few-aggregators")
    assert f is not None and f.evidence["LUSTRE_STRIPE_COUNT"] == 1 and f.evidence["aggregators"] == 1
    assert f.evidence["POSIX_FASTEST_RANK_BYTES"] == 0 and f.evidence["MPIIO_FASTEST_RANK_BYTES"] > 0


# -- contradictions, caps, clamp ------------------------------------------------------------------------


def test_one_layout_per_directory_and_stripe_counts_capped(tmp_path):
    n = 64
    procs = [
        process(
            r,
            n,
            [
                posix_file(
                    "/d/ckpt/shared", writes=2000, xfer=64 << 10, write_time=6.0, stripe_count=1, stripe_size=64 << 10
                )
            ],
        )
        for r in range(n)
    ]
    path = write_profile(tmp_path / "both.jsonl", procs)
    a = run(path)
    layouts = [x.command for f in a.findings for x in f.fixes if x.kind == "surge-layout"]
    # small-transfers (folded into independent-io with its fixes) and shared-file-layout both want the directory
    assert len(layouts) == 1, layouts
    assert layouts[0] == "surge setstripe -c 16 -S 1M /d/ckpt"  # 64 writers, targets unknown: the stated cap
    owner = next(f for f in a.findings if any(x.kind == "surge-layout" for x in f.fixes))
    assert "capped at 16" in owner.evidence["target_cap"]
    others = [f for f in a.findings if f is not owner and "/d/ckpt" in " ".join(f.caveats)]
    assert all(f"see {owner.code}" in " ".join(f.caveats) for f in others)
    capped = run(path, max_targets=4)
    assert "surge setstripe -c 4 -S 1M /d/ckpt" in [x.command for f in capped.findings for x in f.fixes]


def test_gain_text_says_what_the_json_says(tmp_path):
    procs = [process(0, 1, [posix_file("/d/log.bin", writes=200_000, xfer=64, write_time=20.0)])]
    a = run(write_profile(tmp_path / "tiny.jsonl", procs))
    f = finding(a, "small-transfers")
    assert f.gain_fraction <= 0.95 and f.gain.startswith(f"up to {f.gain_fraction:.0%} of I/O time")
    assert "100%" not in f.gain


# -- fsync, std streams, partial logs, reduced records -----------------------------------------------------


def test_fsync_after_every_write_is_found_with_its_counts(tmp_path):
    synced = posix_file("/d/journal", writes=2000, xfer=4096, write_time=10.0, extra={"POSIX_FSYNCS": 2000})
    a = run(write_profile(tmp_path / "fsync.jsonl", [process(0, 1, [synced])]))
    f = finding(a, "fsync-per-write")
    assert f is not None and f.evidence["POSIX_FSYNCS"] == 2000 and f.evidence["POSIX_WRITES"] == 2000
    assert "POSIX_F_WRITE_TIME" in f.summary and "waits for the device" in f.summary
    once = posix_file("/d/journal", writes=2000, xfer=4096, write_time=10.0, extra={"POSIX_FSYNCS": 1})
    assert finding(run(write_profile(tmp_path / "once.jsonl", [process(0, 1, [once])])), "fsync-per-write") is None


def test_random_access_never_names_a_terminal_stream(tmp_path):
    stdout = posix_file("<STDOUT>", writes=5000, xfer=80, seq_pct=0, write_time=0.5)
    data = posix_file("/d/table", writes=3000, xfer=MIB, seq_pct=30, write_time=6.0)
    f = finding(run(write_profile(tmp_path / "rand.jsonl", [process(0, 1, [stdout, data])])), "random-access")
    assert f is not None and f.evidence["file"] == "/d/table"
    assert not any(stream in f.summary for stream in STD_STREAMS)


def test_shuffled_offsets_are_counted_from_backward_and_forward_jumps():
    """The `random` workload: 256 writes of 128 KiB per rank in a shuffled order; Darshan's counters call
    half of them sequential (POSIX_SEQ_WRITES: past the previous end), none consecutive."""
    a = run(os.path.join(SUITE, "random.jsonl"))
    f = a.findings[0]
    assert f.code == "random-access" and f.evidence["random_pct"] >= 95
    assert f.evidence["POSIX_SEQ_READS+POSIX_SEQ_WRITES_pct"] == pytest.approx(49.2, abs=0.1)
    assert f.evidence["POSIX_CONSEC_READS+POSIX_CONSEC_WRITES"] <= 4
    assert "in Surge's buffer" in f.summary and "Lustre OST" in f.summary  # where the pattern costs


def test_strided_writes_and_files_written_once_are_not_random(tmp_path):
    # ranks interleave 64 KiB blocks: every write after the first jumps forward (SEQ), none is consecutive
    strided = [
        process(
            r,
            4,
            [
                posix_file(
                    "/d/shared",
                    writes=2048,
                    xfer=64 << 10,
                    write_time=2.0,
                    extra={"POSIX_SEQ_WRITES": 2047, "POSIX_CONSEC_WRITES": 0},
                )
            ],
        )
        for r in range(4)
    ]
    assert finding(run(write_profile(tmp_path / "strided.jsonl", strided)), "random-access") is None
    # one write at offset 0 per file: Darshan counts a first request as neither sequential nor consecutive
    once = [process(0, 1, [posix_file(f"/d/f{i}", writes=1, seq_pct=0, write_time=0.01) for i in range(2000)])]
    assert finding(run(write_profile(tmp_path / "once.jsonl", once)), "random-access") is None


@needs_public_logs
def test_every_finding_of_a_partial_log_carries_the_caveat():
    a = run(os.path.join(SHARED_LOGS, "partial_data_stdio", "partial_data_stdio.darshan"))
    assert a.findings and all(any("partial log" in c for c in f.caveats) for f in a.findings)
    assert any("ran out of memory in module(s) STDIO" in w for w in a.summary.job.warnings)


@needs_public_logs
def test_reduced_shared_records_do_not_make_a_job_look_balanced():
    s = summarize(read_job(os.path.join(SHARED_LOGS, "skew_io", "skew-app.darshan")))
    assert s.files["reduced"].all()
    assert s.row["rank_time_imbalance"] == -1  # unknown, not 0 = balanced


# -- item 3: severity from impact, the healthy verdict ---------------------------------------------------------


def test_fast_io_is_no_significant_problem_and_never_high(tmp_path):
    procs = [process(0, 1, [posix_file("/d/log.bin", writes=50_000, xfer=512, write_time=0.3)])]
    a = run(write_profile(tmp_path / "fast.jsonl", procs))
    assert a.healthy and a.verdict.startswith("no significant I/O problem") and "fast in absolute terms" in a.verdict
    assert finding(a, "small-transfers") is not None  # the pattern is still shown ...
    assert all(f.severity == "info" for f in a.findings)  # ... but not as a problem


def test_io_that_is_a_small_share_of_the_run_is_no_significant_problem(tmp_path):
    procs = [process(0, 1, [posix_file("/d/log.bin", writes=100_000, xfer=4096, write_time=5.0)], end=200.0)]
    a = run(write_profile(tmp_path / "long.jsonl", procs))
    assert a.healthy and "a small share of the run" in a.verdict
    assert not any(f.severity == "high" for f in a.findings)


def test_severity_follows_the_share_of_the_run_a_fix_saves(tmp_path):
    pattern = dict(writes=100_000, xfer=4096, write_time=20.0)
    io_bound = run(write_profile(tmp_path / "a.jsonl", [process(0, 1, [posix_file("/d/x", **pattern)])]))
    mixed = run(write_profile(tmp_path / "b.jsonl", [process(0, 1, [posix_file("/d/x", **pattern)], end=150.0)]))
    a, b = finding(io_bound, "small-transfers"), finding(mixed, "small-transfers")
    assert a.gain_fraction == b.gain_fraction  # same pattern, same share of the I/O time ...
    assert a.severity == "high" and a.job_share >= 0.25
    assert b.severity == "warn" and b.job_share < 0.25  # ... but a smaller share of the run
    assert not io_bound.healthy and io_bound.verdict.startswith("I/O takes") and "small-transfers" in io_bound.verdict


@needs_public_logs
def test_healthy_public_runs_get_no_high_finding():
    """The release logs are 4-rank runs whose I/O takes tens of milliseconds."""
    logs = sorted(os.listdir(os.path.join(SHARED_LOGS, "release_logs")))
    for name in (n for n in logs if n.endswith(".darshan")):
        a = run(os.path.join(SHARED_LOGS, "release_logs", name))
        assert a.healthy, (name, a.verdict)
        assert not any(f.severity == "high" for f in a.findings), name
    badost = next(p for p in example_logs() if p.endswith("sample-badost.darshan"))
    slow = run(badost)
    assert not slow.healthy and slow.findings[0].severity == "high"  # a 778 s straggler is a problem


@pytest.mark.parametrize("verdict_first", ["text", "html"])
def test_reports_state_the_verdict_before_any_finding(tmp_path, verdict_first):
    from surge_tune.report.html import render_html
    from surge_tune.report.text import render_text

    procs = [process(0, 1, [posix_file("/d/log.bin", writes=50_000, xfer=512, write_time=0.3)])]
    a = run(write_profile(tmp_path / "fast.jsonl", procs))
    out = render_text(a) if verdict_first == "text" else render_html([a], [])
    assert out.index("no significant I/O problem") < out.index("small-transfers")
