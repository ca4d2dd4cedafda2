"""The labelled accuracy benchmark (`surge tune bench accuracy`): scoring, labels, Drishti's environment,
the Darshan export it feeds Drishti, the rule fixes it showed, and one small generated suite end to end."""

import os
import shutil
import subprocess
import sys

import pytest
from profiles import posix_file, process, write_profile

from surge_tune.accuracy import run_accuracy, tuner_answer
from surge_tune.accuracy.drishti import ensure_drishti
from surge_tune.accuracy.labels import Case, read_labels, write_labels
from surge_tune.accuracy.score import Answer, score, table
from surge_tune.accuracy.suite import find_surge, generate
from surge_tune.analyze import analyze
from surge_tune.darshan_export import export
from surge_tune.errors import TuneError
from surge_tune.features import summarize
from surge_tune.ingest import read_job

MIB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(*pairs):
    return [Case(name, f"{name}.jsonl", cause, "generated") for name, cause in pairs]


# -- scoring ----------------------------------------------------------------------------------------------


def test_precision_recall_and_false_high_follow_their_definitions():
    suite = cases(
        ("a", "small-transfers"), ("b", "small-transfers"), ("c", "random-access"), ("d", "none"), ("e", "none")
    )
    answers = {
        "a": Answer("small-transfers", True),
        "b": Answer("random-access", True),  # wrong cause
        "c": Answer("random-access", False),
        "d": Answer("small-transfers", True),  # a control answered with a HIGH
        "e": Answer("none", False),
    }
    s = score(suite, answers)
    small, rnd = s.per_cause["small-transfers"], s.per_cause["random-access"]
    assert (small["n"], small["hits"], small["answered"]) == (2, 1, 2)
    assert (small["precision"], small["recall"]) == (0.5, 0.5)
    assert (rnd["precision"], rnd["recall"]) == (0.5, 1.0)
    assert s.recall == 2 / 3 and s.pathological == 3
    assert s.recall_named == 0.0  # no answer listed what it named
    answers["b"].named = ("random-access", "small-transfers")  # b's label, named below its top answer
    assert score(suite, answers).recall_named == 1 / 3
    assert (s.false_high, s.controls, s.false_high_rate) == (1, 2, 0.5)


def test_a_failed_answer_is_a_miss_and_a_cause_never_answered_has_no_precision():
    suite = cases(("a", "fsync-per-write"), ("b", "none"))
    s = score(suite, {"a": Answer("fsync-per-write", True, error="Drishti failed")})  # b: no answer at all
    assert s.per_cause["fsync-per-write"]["recall"] == 0.0
    assert s.per_cause["fsync-per-write"]["precision"] is None
    assert s.failed == 2 and s.false_high == 0
    md = table(suite, {"tuner": s})
    assert "| fsync-per-write | 1 | – | 0.00 |" in md and "false HIGH 0/1" in md


# -- labels -----------------------------------------------------------------------------------------------


def suite_with(tmp_path, text):
    (tmp_path / "p.jsonl").write_text("{}\n")
    (tmp_path / "labels.toml").write_text(text)
    return str(tmp_path)


def test_labels_written_are_read_back(tmp_path):
    (tmp_path / "p.jsonl").write_text("{}\n")
    written = [Case("tiny-1", "p.jsonl", "small-transfers", "generated"), Case('odd "q"', "p.jsonl", "none", "public")]
    write_labels(str(tmp_path), written, "a header\nover two lines")
    assert read_labels(str(tmp_path)) == written


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[case]]\nname="a"\ninput="p.jsonl"\ncause="slow"\nsource="generated"\n', "unknown cause 'slow'"),
        ('[[case]]\nname="a"\ninput="p.jsonl"\nsource="generated"\n', "case 1 lacks cause"),
        ('[[case]]\nname="a"\ninput="gone.jsonl"\ncause="none"\nsource="generated"\n', "does not exist"),
        ('[[case]]\nname="a"\ninput="p.jsonl"\ncause="none"\nsource="lab"\n', "source must be one of"),
        (
            '[[case]]\nname="a"\ninput="p.jsonl"\ncause="none"\nsource="public"\n' * 2,
            "case name 'a' appears twice",
        ),
        ("[[case]\n", "not valid TOML"),
        ("title = 'no cases'\n", "no [[case]] entries"),
    ],
)
def test_bad_labels_are_refused_with_the_reason(tmp_path, text, message):
    with pytest.raises(TuneError, match=message.replace("[", r"\[")):
        read_labels(suite_with(tmp_path, text))


def test_a_suite_without_labels_says_how_to_make_one(tmp_path):
    with pytest.raises(TuneError, match="no labels.toml .*--generate"):
        read_labels(str(tmp_path))


# -- Drishti ----------------------------------------------------------------------------------------------


def test_drishti_that_cannot_be_installed_says_what_to_do(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = str(blocker / "env")  # a virtualenv cannot be created under a regular file
    with pytest.raises(TuneError, match=r"(?s)cannot install Drishti into .*--no-drishti"):
        ensure_drishti(env, progress=lambda line: None)


def test_the_cli_reports_a_missing_drishti_as_an_error_not_a_traceback(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    (tmp_path / "p.jsonl").write_text("")
    write_profile(tmp_path / "p.jsonl", [process(0, 1, [posix_file("/d/f", writes=10, write_time=0.1)])])
    write_labels(str(tmp_path), [Case("p", "p.jsonl", "none", "generated")], "test")
    p = subprocess.run(
        [sys.executable, "-m", "surge_tune", "bench", "accuracy", "--suite", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "SURGE_DRISHTI_ENV": str(blocker / "env")},
    )
    assert p.returncode == 2 and "error: cannot install Drishti" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--no-drishti"], "--no-drishti belongs to `surge tune bench accuracy`"),
        (["bench", "accuracy", "--generate", "a", "--suite", "b"], "give one of them"),
        (["bench", "accuracy", "some.darshan"], "takes no logs"),
        (["bench", "accuracy", "--suite", "/nonexistent-suite"], "no labels.toml"),
    ],
)
def test_bench_accuracy_refuses_contradictory_arguments(argv, message):
    p = subprocess.run([sys.executable, "-m", "surge_tune", *argv], capture_output=True, text=True)
    assert p.returncode == 2 and message in p.stderr, p.stderr


# -- the Darshan export -----------------------------------------------------------------------------------


def test_an_exported_profile_reads_back_through_pydarshan_and_the_tuner(tmp_path):
    import darshan

    procs = [
        process(r, 4, [posix_file("/d/shared", writes=64, write_time=0.5 + r * 0.5, unaligned=3)], pid=10 + r)
        for r in range(4)
    ]
    procs[0]["files"].append(posix_file("/d/only0", reads=8, read_time=0.2))
    procs.append(process(-1, -1, [posix_file("/d", stats=1)], exe="/bin/sh", pid=5))  # a launcher's shell
    profile = write_profile(tmp_path / "job.jsonl", procs)
    log = str(tmp_path / "job.darshan")
    assert export(profile, log) == 2  # one shared record, one rank-0 record; the shell's is left out

    report = darshan.DarshanReport(log, read_all=True)
    assert report.metadata["job"]["nprocs"] == 4 and report.metadata["exe"] == "/apps/app"
    rows = report.records["POSIX"].to_df()
    counters, fcounters = rows["counters"], rows["fcounters"]
    names = {report.name_records[i] for i in counters["id"]}
    assert names == {"/d/shared", "/d/only0"}
    shared = counters[counters["id"] == next(k for k, v in report.name_records.items() if v == "/d/shared")]
    assert list(shared["rank"]) == [-1]
    assert int(shared["POSIX_WRITES"].iloc[0]) == 256 and int(shared["POSIX_BYTES_WRITTEN"].iloc[0]) == 256 * MIB
    assert int(shared["POSIX_FILE_NOT_ALIGNED"].iloc[0]) == 12
    assert int(shared["POSIX_SLOWEST_RANK"].iloc[0]) == 3 and int(shared["POSIX_FASTEST_RANK"].iloc[0]) == 0
    f_shared = fcounters[fcounters["id"] == shared["id"].iloc[0]]
    assert f_shared["POSIX_F_WRITE_TIME"].iloc[0] == pytest.approx(0.5 + 1.0 + 1.5 + 2.0)

    original, exported = summarize(read_job(profile)).row, summarize(read_job(log)).row
    for key in ("bytes_written", "bytes_read", "posix_writes", "posix_reads", "write_time", "unaligned_pct"):
        assert exported[key] == pytest.approx(original[key]), key


def test_an_exported_profile_with_mpi_io_counters_has_the_mpi_io_module_drishti_and_the_tuner_read(tmp_path):
    """A real profile (`bench accuracy`'s independent case: 4 ranks, 512 MPI_File_write_at of 64 KiB each on
    one shared file): its MPI-IO counters become one shared MPI-IO record beside the POSIX one."""
    import darshan

    profile = os.path.join(os.path.dirname(__file__), "fixtures", "accuracy", "independent.jsonl")
    log = str(tmp_path / "independent.darshan")
    export(profile, log)
    report = darshan.DarshanReport(log, read_all=True)
    assert set(report.modules) == {"POSIX", "MPI-IO"}
    rows = report.records["MPI-IO"].to_df()
    counters, fcounters = rows["counters"], rows["fcounters"]
    assert [report.name_records[i].rsplit("/", 1)[1] for i in counters["id"]] == ["shared"]
    shared = counters.iloc[0]
    assert shared["rank"] == -1 and shared["MPIIO_INDEP_WRITES"] == 2048 and shared["MPIIO_COLL_WRITES"] == 0
    assert shared["MPIIO_COLL_OPENS"] == 4 and shared["MPIIO_BYTES_WRITTEN"] == 128 * MIB
    assert shared["MPIIO_SIZE_WRITE_AGG_10K_100K"] == 2048
    assert shared["MPIIO_SLOWEST_RANK_BYTES"] == shared["MPIIO_FASTEST_RANK_BYTES"] == 32 * MIB
    assert fcounters.iloc[0]["MPIIO_F_WRITE_TIME"] > 0
    ranks = read_job(profile).frame("MPI-IO")
    slowest_call = ranks.loc[ranks["MPIIO_F_MAX_WRITE_TIME"].idxmax()]
    assert fcounters.iloc[0]["MPIIO_F_MAX_WRITE_TIME"] == pytest.approx(slowest_call["MPIIO_F_MAX_WRITE_TIME"])
    assert shared["MPIIO_MAX_WRITE_TIME_SIZE"] == slowest_call["MPIIO_MAX_WRITE_TIME_SIZE"] == 64 << 10

    original, exported = summarize(read_job(profile)).row, summarize(read_job(log)).row
    for key in ("mpiio_indep_writes", "mpiio_coll_writes", "mpiio_bytes", "collective", "interface"):
        assert exported[key] == original[key], key
    assert analyze(summarize(read_job(log))).findings[0].code == "independent-io"


def test_exporting_a_darshan_log_or_nothing_or_an_overlong_name_is_refused(tmp_path):
    from conftest import example_logs

    long_name = "/d/" + "x" * 5000
    profile = write_profile(tmp_path / "long.jsonl", [process(0, 1, [posix_file(long_name, writes=1)])])
    with pytest.raises(TuneError, match="file name of 5003 bytes does not fit a Darshan log"):
        export(profile, str(tmp_path / "long.darshan"))

    with pytest.raises(TuneError, match="already a Darshan log"):
        export(example_logs()[0], str(tmp_path / "x.darshan"))
    p = subprocess.run(
        [sys.executable, "-m", "surge_tune", "export", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "no such file" in p.stderr


# -- rule fixes the benchmark showed ----------------------------------------------------------------------


def test_a_launchers_shell_is_not_a_rank_of_the_decomposition(tmp_path):
    """Four equal ranks and the shell that made their directory: not an imbalance of the ranks."""
    procs = [process(r, 4, [posix_file(f"/d/r{r}", writes=512, write_time=2.0)]) for r in range(4)]
    procs.append(process(-1, -1, [posix_file("/d", stats=1, meta_time=0.01)], exe="/bin/sh", pid=9))
    a = analyze(summarize(read_job(write_profile(tmp_path / "p.jsonl", procs))))
    assert not any(f.code == "load-imbalance" for f in a.findings)


def test_one_rank_doing_all_the_io_is_an_imbalance_over_every_rank(tmp_path):
    procs = [process(0, 4, [posix_file("/d/all", writes=2048, write_time=8.0)])]
    procs += [process(r, 4, [], end=8.0) for r in range(1, 4)]  # ranks without any Surge I/O
    a = analyze(summarize(read_job(write_profile(tmp_path / "p.jsonl", procs))))
    f = next(f for f in a.findings if f.code == "load-imbalance")
    assert f.evidence["mean_rank_io_time"] == pytest.approx(8.01 / 4, abs=1e-3)  # idle ranks count as 0 s
    assert f.evidence["ranks_with_io"] == 1
    assert "data decomposition is uneven" in f.summary
    assert a.findings[0] is f and f.severity == "high"  # 8 s of I/O, three quarters of it avoidable


def test_small_independent_pieces_of_a_shared_file_are_one_cause_not_two(tmp_path):
    procs = [
        process(r, 8, [posix_file("/d/shared", writes=2048, xfer=64 << 10, write_time=4.0, seq_pct=100)])
        for r in range(8)
    ]
    a = analyze(summarize(read_job(write_profile(tmp_path / "p.jsonl", procs))))
    codes = [f.code for f in a.findings]
    assert "independent-io" in codes and "small-transfers" not in codes
    top = next(f for f in a.findings if f.code == "independent-io")
    assert any("small-transfers on this file is a symptom" in c for c in top.caveats)
    assert any(fix.kind == "code" and "buffer writes" in fix.command for fix in top.fixes)  # its fixes kept


def test_unaligned_transfers_say_so_in_their_evidence(tmp_path):
    procs = [
        process(r, 4, [posix_file(f"/d/r{r}", writes=512, xfer=192 << 10, unaligned=512, write_time=3.0)])
        for r in range(4)
    ]
    a = analyze(summarize(read_job(write_profile(tmp_path / "p.jsonl", procs))))
    f = next(f for f in a.findings if f.code == "small-transfers")
    assert f.evidence["pattern"] == "unaligned" and tuner_answer(str(tmp_path / "p.jsonl")).cause == "unaligned-access"


# -- a small generated suite, end to end ------------------------------------------------------------------


def _surge_or_skip() -> str:
    for candidate in (os.environ.get("SURGE_BIN"), shutil.which("surge"), os.path.join(REPO, "target/debug/surge")):
        if candidate and os.access(candidate, os.X_OK):
            return find_surge(candidate)
    pytest.skip("no surge binary ($SURGE_BIN, PATH or target/debug/surge): cargo build -p surge-cli")


@pytest.mark.skipif(not (shutil.which("mpicc") and shutil.which("mpirun")), reason="mpicc/mpirun not installed")
def test_a_small_generated_suite_is_labelled_and_scored(tmp_path):
    surge = _surge_or_skip()
    suite = str(tmp_path / "suite")
    made = generate(
        suite,
        surge=surge,
        nprocs=2,
        mib=8,
        repeats=1,
        public=False,
        only=("clean-fpp", "tiny"),
        progress=lambda line: None,
    )
    assert [(c.name, c.cause) for c in made] == [("clean-fpp-1", "none"), ("tiny-1", "small-transfers")]
    assert read_labels(suite) == made
    profile = read_job(made[1].path(suite))
    assert profile.nprocs == 2 and profile.frame("POSIX")["POSIX_WRITES"].sum() >= 1024
    result = run_accuracy(suite, drishti=False, progress=lambda line: None)
    answers = {c["name"]: c["tuner"] for c in result["cases"]}
    assert answers["tiny-1"]["cause"] == "small-transfers"
    assert not answers["clean-fpp-1"]["high"]
    assert "| small-transfers | 1 |" in result["table"]
