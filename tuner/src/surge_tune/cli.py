"""`python3 -m surge_tune ...` (and `surge tune ...`, which execs it with the same arguments).

Heavy modules (pandas, pydarshan, matplotlib, scikit-learn) are imported inside the command that needs
them so `--help` and small commands start fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial

from surge_tune.errors import TuneError

DEFAULT_DB = os.path.join(os.path.expanduser("~"), ".surge", "tune.db")


JOB_HELP = "the job to read from a Surge profile that several runs appended to (its job_id; default: the only one)"


def _db_path(args) -> str:
    return args.db or os.environ.get("SURGE_TUNE_DB") or DEFAULT_DB


def cmd_analyze(args) -> int:
    from surge_tune.analyze import analyze
    from surge_tune.analyze.base import Thresholds
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job
    from surge_tune.ingest.isolate import imap_isolated

    try:
        thresholds = Thresholds.with_overrides(args.set or [])
    except ValueError as e:
        raise TuneError(str(e)) from None
    missing = [p for p in args.logs if not os.path.exists(p)]
    if missing:
        raise TuneError(f"{missing[0]}: no such file")
    # Each log is read in a forked worker: a log that makes libdarshan-util abort costs one line, not the run.
    outcomes = {o.item: o for o in imap_isolated(partial(read_job, job=args.job), args.logs, workers=1)}
    analyses, errors = [], []
    for path in args.logs:
        o = outcomes[path]
        if o.ok:
            analyses.append(analyze(summarize(o.value), thresholds))
            for warning in o.value.warnings:
                print(f"warning: {path}: {warning}", file=sys.stderr)
        else:
            errors.append({"path": path, "reason": o.reason})
            print(f"error: {path}: {o.reason}", file=sys.stderr)
    if args.json:
        from surge_tune.report.json_report import render_json

        print(render_json(analyses, errors))
    else:
        from surge_tune.report.text import render_text

        for a in analyses:
            print(render_text(a))
    if args.html:
        from surge_tune.report.html import render_html

        with open(args.html, "w") as f:
            f.write(render_html(analyses, errors))
        print(f"HTML report written to {args.html}", file=sys.stderr)
    return 1 if errors else 0


def cmd_ingest(args) -> int:
    from surge_tune.ingest.batch import ingest

    missing = [p for p in args.inputs if not os.path.exists(p)]
    if missing:
        raise TuneError(f"{missing[0]}: no such file or directory")
    stats = ingest(
        args.inputs,
        args.out,
        workers=args.workers,
        row_group_jobs=args.row_group,
        progress=not args.quiet,
        timeout=args.timeout,
    )
    print(
        json.dumps(
            {
                "jobs": stats.jobs,
                "file_rows": stats.files,
                "skipped": len(stats.errors),
                "seconds": round(stats.seconds, 2),
                "logs_per_second": round((stats.jobs + len(stats.errors)) / max(stats.seconds, 1e-9), 1),
                "peak_rss_parent_mib": round(stats.peak_rss_parent_mib, 1),
                "peak_rss_worker_mib": round(stats.peak_rss_worker_mib, 1),
                "out": args.out,
            },
            indent=2,
        )
    )
    for err in stats.errors:
        print(f"skipped {err['path']}: {err['reason']}", file=sys.stderr)
    return 0


def cmd_schema(args) -> int:
    from surge_tune.features import schema_markdown

    print(schema_markdown())
    return 0


def cmd_record(args) -> int:
    from surge_tune.dcaio.history import History
    from surge_tune.features import summarize
    from surge_tune.ingest import read_job

    with History(_db_path(args)) as db:
        for path in args.inputs:
            run = db.record(summarize(read_job(path, with_dxt=False, job=args.job)), app=args.app)
            print(
                f"recorded {run.app}: {run.nprocs} procs, stripe {run.stripe_count} x {run.stripe_size}, "
                f"{run.throughput_mib_s:.1f} MiB/s {run.direction} "
                f"({'shared file' if run.shared_file else 'file-per-process'})"
            )
    return 0


def cmd_history(args) -> int:
    from surge_tune.dcaio.history import History

    with History(_db_path(args)) as db:
        runs = db.runs(args.app) if args.app else db.all_runs()
        if args.app and not runs:
            raise TuneError(f"no runs recorded for application {args.app!r} (known: {', '.join(db.apps()) or 'none'})")
        if args.json:
            print(json.dumps([r.__dict__ for r in runs], indent=2))
        else:
            print(f"{'app':20} {'procs':>5} {'count':>5} {'size':>9} {'MiB/s':>9} {'io':5} {'layout':16} source")
            for r in runs:
                print(
                    f"{r.app:20} {r.nprocs:5d} {r.stripe_count:5d} {r.stripe_size:9d} {r.throughput_mib_s:9.1f} "
                    f"{r.direction:5} "
                    f"{'shared' if r.shared_file else 'file-per-process':16} {r.source}"
                )
    return 0


def cmd_layout(args) -> int:
    from surge_tune.dcaio.engine import decide_layout
    from surge_tune.dcaio.history import History
    from surge_tune.dcaio.loads import read_target_loads

    loads = read_target_loads(args.loads, surge_bin=os.environ.get("SURGE_BIN")) if args.interference else None
    with History(_db_path(args)) as db:
        decision = decide_layout(
            db,
            args.app,
            nprocs=args.nprocs,
            max_targets=args.max_targets,
            loads=loads,
            allow_new=args.new,
            direction=args.io,
        )
    if args.json:
        print(json.dumps(decision.to_dict(), indent=2))
    else:
        print(decision.describe())
    if args.apply:
        from surge_tune.dcaio.apply import apply_layout

        print(apply_layout(decision, args.apply))
    return 0


def cmd_autotune_propose(args) -> int:
    from surge_tune.dcaio.autotune import propose
    from surge_tune.dcaio.loads import read_target_loads

    loads = read_target_loads(args.loads, surge_bin=os.environ.get("SURGE_BIN"))
    print(json.dumps(propose(_db_path(args), args.app, loads, max_targets=args.max_targets)))
    return 0


def cmd_autotune_record(args) -> int:
    from surge_tune.dcaio.autotune import record

    print(json.dumps(record(_db_path(args), args.app, args.profile, job=args.job)))
    return 0


def cmd_corpus_generate(args) -> int:
    from surge_tune.corpus.generate import generate

    summary = generate(
        args.out,
        quick=args.quick,
        repeats=args.repeats,
        seed=args.seed,
        workdir=args.workdir,
        tools=args.tools,
        daemons=args.daemons,
    )
    print(json.dumps(summary, indent=2))
    return 0


def cmd_ml_evaluate(args) -> int:
    from surge_tune.ml.evaluate import evaluate, format_report

    report = evaluate(args.data, seed=args.seed, clusters=args.clusters, knn_k=args.knn_k, variants=args.variants)
    print(json.dumps(report, indent=2, default=float) if args.json else format_report(report))
    return 0


def cmd_ml_recommend(args) -> int:
    from surge_tune.ml.recommend import held_out, recommend

    if args.held_out:
        if args.app:
            raise TuneError("--held-out evaluates every application: give --app or --held-out, not both")
        result = held_out(args.data, seed=args.seed)
    elif not args.app:
        raise TuneError("give --app APP (recommend settings for it) or --held-out (evaluate the recommender)")
    else:
        result = recommend(args.data, args.app, nprocs=args.nprocs, seed=args.seed)
    print(json.dumps(result, indent=2, default=float))
    return 0


ACCURACY_OPTIONS = (
    "generate",
    "suite",
    "surge",
    "nprocs",
    "mib",
    "repeats",
    "no_public",
    "no_drishti",
    "drishti_env",
    "json",
)


def cmd_bench(args) -> int:
    if args.logs[:1] == ["accuracy"]:
        return cmd_bench_accuracy(args)
    given = [o for o in ACCURACY_OPTIONS if getattr(args, o) not in (None, False)]
    if given:
        raise TuneError(f"--{given[0].replace('_', '-')} belongs to `surge tune bench accuracy`")
    from surge_tune.bench import run_bench

    print(run_bench(args.logs or None, runs=args.runs, out=args.out, corpus=args.corpus))
    return 0


def cmd_bench_accuracy(args) -> int:
    import tempfile

    from surge_tune.accuracy import format_cases, run_accuracy
    from surge_tune.accuracy.suite import generate

    if len(args.logs) > 1:
        raise TuneError("`surge tune bench accuracy` takes no logs: name a suite with --suite DIR")
    if args.generate and args.suite:
        raise TuneError("--generate DIR writes a suite and --suite DIR scores one: give one of them")

    def progress(line: str) -> None:
        print(line, file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="surge-accuracy-suite-") as tmp:
        suite = args.suite or args.generate or tmp
        if not args.suite:
            generate(
                suite,
                surge=args.surge,
                nprocs=args.nprocs or 4,
                mib=args.mib or 32,
                repeats=args.repeats or 2,
                public=not args.no_public,
                progress=progress,
            )
        result = run_accuracy(suite, drishti=not args.no_drishti, drishti_env=args.drishti_env, progress=progress)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        text = f"Accuracy on {result['suite']}:\n\n{result['table']}\n\nPer case:\n\n{format_cases(result)}\n"
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
    return 0


def cmd_export(args) -> int:
    from surge_tune.darshan_export import export

    if not os.path.exists(args.profile):
        raise TuneError(f"{args.profile}: no such file")
    n = export(args.profile, args.out, job=args.job)
    print(f"{args.out}: {n} record(s) (POSIX, and MPI-IO where recorded) from {args.profile}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="surge tune",
        description="Surge tuner: root causes, DCA-IO layouts, ML predictions from Darshan logs and Surge profiles.",
    )
    p.add_argument("--db", help=f"DCA-IO history database (default $SURGE_TUNE_DB or {DEFAULT_DB})")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("analyze", help="find the causes of slow I/O in logs/profiles, with evidence and fixes")
    a.add_argument("logs", nargs="+", metavar="LOG", help="Darshan log or Surge profile (.jsonl)")
    a.add_argument("--json", action="store_true", help="print JSON instead of text")
    a.add_argument("--job", metavar="ID", help=JOB_HELP)
    a.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with figures")
    a.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="override a threshold (e.g. small_request_pct=5, max_targets=8); repeatable",
    )
    a.set_defaults(fn=cmd_analyze)

    i = sub.add_parser("ingest", help="turn a corpus of logs/profiles into the Parquet feature table")
    i.add_argument("inputs", nargs="+", metavar="PATH", help="files, or directories searched for *.darshan/*.jsonl")
    i.add_argument("--out", required=True, help="output directory (jobs.parquet, files.parquet, errors.jsonl)")
    i.add_argument("--workers", type=int, default=2, help="isolated reader processes (default 2)")
    i.add_argument("--row-group", type=int, default=256, help="jobs per Parquet row group (bounds memory)")
    i.add_argument("--timeout", type=float, default=300.0, help="seconds before a reader is killed")
    i.add_argument("--quiet", action="store_true", help="no progress bar")
    i.set_defaults(fn=cmd_ingest)

    s = sub.add_parser("schema", help="print the feature-table schema as Markdown")
    s.set_defaults(fn=cmd_schema)

    r = sub.add_parser("record", help="add runs (from logs or profiles) to the DCA-IO history")
    r.add_argument("inputs", nargs="+", metavar="LOG")
    r.add_argument("--app", help="record under this application name instead of the program name")
    r.add_argument("--job", metavar="ID", help=JOB_HELP)
    r.set_defaults(fn=cmd_record)

    h = sub.add_parser("history", help="list recorded runs (all, or one application's)")
    h.add_argument("app", nargs="?")
    h.add_argument("--json", action="store_true")
    h.set_defaults(fn=cmd_history)

    lay = sub.add_parser("layout", help="DCA-IO: stripe count/size for the next run of APP (and apply it)")
    lay.add_argument("app")
    lay.add_argument("--nprocs", type=int, help="processes of the coming run (default: the last run's)")
    lay.add_argument(
        "--max-targets",
        type=int,
        default=0,
        help="storage targets available (default: from --loads, else `surge status`, else 4)",
    )
    lay.add_argument(
        "--io",
        choices=("write", "read"),
        help="direction of the coming run; only recorded runs of it are compared (default: the last run's)",
    )
    lay.add_argument("--loads", metavar="FILE", help="per-target load (TOML or JSON); default: `surge status --toml`")
    lay.add_argument(
        "--no-interference",
        dest="interference",
        action="store_false",
        help="skip the interference adjustment (Procedure 3)",
    )
    lay.add_argument(
        "--new",
        action="store_true",
        help="APP has no history yet: use the initial-execution rule over other apps' runs",
    )
    lay.add_argument("--apply", metavar="PATH", help="run `surge setstripe -c N -S SIZE PATH` ($SURGE_BIN or PATH)")
    lay.add_argument("--json", action="store_true")
    lay.set_defaults(fn=cmd_layout)

    at = sub.add_parser(
        "autotune",
        help="`surge run --autotune`: propose a layout before a job, record its profile after (one JSON line each)",
    )
    atsub = at.add_subparsers(dest="autotune_command", required=True, metavar="COMMAND")
    ap = atsub.add_parser(
        "propose",
        help="DCA-IO layout for APP's next run from the history and the daemons' queued requests; "
        'an APP with no recorded run gets {"status": "no-history"}',
    )
    ap.add_argument("app")
    ap.add_argument("--loads", metavar="FILE", help="per-target load (TOML or JSON); default: `surge status --toml`")
    ap.add_argument("--max-targets", type=int, default=0, help="storage targets (default: the daemons in the loads)")
    ap.set_defaults(fn=cmd_autotune_propose)
    ar = atsub.add_parser("record", help="add the job's Surge profile to the history as a run of APP")
    ar.add_argument("app")
    ar.add_argument("profile", metavar="PROFILE")
    ar.add_argument("--job", metavar="ID", help=JOB_HELP)
    ar.set_defaults(fn=cmd_autotune_record)

    c = sub.add_parser("corpus", help="training corpus tools")
    csub = c.add_subparsers(dest="corpus_command", required=True, metavar="COMMAND")
    g = csub.add_parser(
        "generate",
        help="run real fio and MPI-IO workloads through `surge run` over a sweep of layouts, write their profiles",
        description="Each workload runs once per layout of the sweep (stripe count x stripe size, set with "
        "`surge setstripe` on the job's data directory) in its own job-scoped Surge cluster. Needs `surge` "
        "($SURGE_BIN or PATH), fio and Open MPI.",
    )
    g.add_argument("--out", required=True, help="output directory (profiles/*.jsonl, table/, corpus.json)")
    g.add_argument("--quick", action="store_true", help="48 runs, about 2 minutes (tests, fixtures)")
    g.add_argument("--daemons", type=int, default=4, help="daemons of each job's cluster (at least 4, default 4)")
    g.add_argument("--repeats", type=int, default=1, help="repetitions of every configuration")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--workdir", help="directory the workloads write to (default: a temp dir under --out)")
    g.add_argument("--tools", default="fio,mpiio", help="comma-separated: fio, mpiio")
    g.set_defaults(fn=cmd_corpus_generate)

    m = sub.add_parser("ml", help="throughput prediction ([Bang23, ch. 5] and gradient boosting)")
    msub = m.add_subparsers(dest="ml_command", required=True, metavar="COMMAND")
    e = msub.add_parser(
        "evaluate",
        help="the thesis's ('seed') protocol and the held-out figure (nested GroupKFold by application)",
        description="The held-out figure selects clustering features, clusters and the model variant inside each "
        "training fold (inner GroupKFold), with and without the layout inputs (stripe count and size).",
    )
    e.add_argument("data", nargs="+", help="feature-table directories (from `ingest`) or jobs.parquet files")
    e.add_argument("--clusters", type=int, default=0, help="number of clusters (0 = pick by silhouette/DBI)")
    e.add_argument("--knn-k", type=int, default=5)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--no-variants",
        dest="variants",
        action="store_false",
        help="skip the table of every variant on its own (a description; the held-out figure does not use it)",
    )
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=cmd_ml_evaluate)
    rc = msub.add_parser(
        "recommend",
        help="search the user-settable parameters for the best predicted throughput",
        description="With --app: the best predicted settings for APP, or 'unknown' when the model predicts APP's "
        "current settings (its latest run's) more than 2x away from their measured throughput. With --held-out: "
        "leave each application out of training in turn and report how often that prediction is within 2x.",
    )
    rc.add_argument("data", nargs="+")
    rc.add_argument("--app")
    rc.add_argument("--held-out", action="store_true", help="evaluate the recommender on held-out applications")
    rc.add_argument("--nprocs", type=int, help="fix the process count (default: search it too)")
    rc.add_argument("--seed", type=int, default=0)
    rc.set_defaults(fn=cmd_ml_recommend)

    b = sub.add_parser(
        "bench",
        help="analyze time per log, ingestion rate, peak memory, prediction accuracy; "
        "`bench accuracy`: labelled diagnosis accuracy against Drishti",
        description="`surge tune bench [LOG...]` times analyze and ingest. `surge tune bench accuracy` runs "
        "pathologies.c through `surge run` (one injected pathology per run, and clean controls), adds the "
        "documented public logs, and scores the tuner's and Drishti's top answer per cause (precision, "
        "recall) and their HIGH answers on the controls.",
    )
    b.add_argument("logs", nargs="*", help="logs to time (default: ../shared/darshan-logs + pydarshan examples)")
    b.add_argument("--runs", type=int, default=5, help="repetitions; medians are reported")
    b.add_argument("--corpus", help="generated corpus directory for the accuracy table")
    b.add_argument("--out", help="also write the Markdown to this file")
    acc = b.add_argument_group("bench accuracy")
    acc.add_argument("--generate", metavar="DIR", help="write the suite (profiles + labels.toml) here, then score it")
    acc.add_argument("--suite", metavar="DIR", help="score an existing suite (default: generate one in a temp dir)")
    acc.add_argument("--surge", metavar="PATH", help="surge binary running the workloads (default $SURGE_BIN, PATH)")
    acc.add_argument("--nprocs", type=int, help="MPI ranks per workload (default 4)")
    acc.add_argument("--mib", type=int, help="MiB each rank writes (default 32)")
    acc.add_argument("--repeats", type=int, help="runs of every workload (default 2)")
    acc.add_argument("--no-public", action="store_true", help="leave the public Darshan logs out of the suite")
    acc.add_argument("--no-drishti", action="store_true", help="score the tuner only")
    acc.add_argument(
        "--drishti-env",
        metavar="DIR",
        help="Drishti's virtualenv (default $SURGE_DRISHTI_ENV, "
        "else ~/.cache/surge/drishti; created with pip install drishti-io on first use)",
    )
    acc.add_argument("--json", action="store_true", help="print cases, answers and scores as JSON")
    b.set_defaults(fn=cmd_bench)

    x = sub.add_parser(
        "export", help="write a Surge profile as a Darshan log (POSIX and MPI-IO modules), for Darshan tools"
    )
    x.add_argument("profile", metavar="PROFILE", help="Surge profile (.jsonl)")
    x.add_argument("-o", "--out", required=True, metavar="LOG", help="Darshan log to write (replaced if it exists)")
    x.add_argument("--job", metavar="ID", help=JOB_HELP)
    x.set_defaults(fn=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except TuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
