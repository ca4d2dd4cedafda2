//! The live view of real daemons: their Prometheus endpoint (`surge start
//! --metrics-port`, `surged --metrics`) scraped over plain HTTP, and
//! `surge top` while a job writes.

use prometheus_parse::{LineInfo, Scrape, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use std::{fs, thread};
use surge_testkit::cluster::{surge_bin, Cluster};
use surge_testkit::{eventually, pattern};

/// Runs `surge ARGS` on `c` as job `job` (SURGE_JOB_ID), asserting success; returns stdout.
fn as_job(c: &Cluster, job: u64, args: &[&str]) -> Vec<u8> {
    let out = c.command(args).env("SURGE_JOB_ID", job.to_string()).output().unwrap();
    assert!(out.status.success(), "surge {args:?} as job {job}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The address daemon `index` serves its metrics on, as its log says.
fn metrics_addr(c: &Cluster, index: u32) -> SocketAddr {
    let text = fs::read_to_string(c.buffer().join(format!("daemon-{index}/surged.log"))).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("surged[{index}]: serving metrics on http://")));
    let addr = line.and_then(|l| l.strip_suffix("/metrics")).unwrap_or_else(|| panic!("no metrics address in {text}"));
    addr.parse().unwrap()
}

/// `GET /metrics` over plain HTTP/1.0: the status line and the body.
fn scrape(addr: SocketAddr) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("not an HTTP reply: {reply}"));
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// The samples of a scrape, after checking every line is exposition format:
/// a sample with a number, or a comment of the format.
fn parse(body: &str) -> Scrape {
    for line in body.lines() {
        match LineInfo::parse(line) {
            LineInfo::Sample { value, .. } => {
                let number = value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value);
                assert!(number, "not a number in {line:?}");
            }
            LineInfo::Doc { .. } | LineInfo::Type { .. } => {}
            _ => assert!(["# UNIT ", "# EOF"].iter().any(|c| line.starts_with(c)), "not exposition format: {line:?}"),
        }
    }
    assert_eq!(body.lines().last(), Some("# EOF"), "an OpenMetrics exposition ends with # EOF");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The sum over `scrapes` of the samples named `metric` whose labels include `labels`.
fn total(scrapes: &[Scrape], metric: &str, labels: &[(&str, &str)]) -> f64 {
    let value = |v: &Value| match v {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        _ => 0.0,
    };
    scrapes
        .iter()
        .flat_map(|s| &s.samples)
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| value(&s.value))
        .sum()
}

fn scrape_all(c: &Cluster, daemons: u32) -> Vec<Scrape> {
    (0..daemons)
        .map(|i| {
            let (status, body) = scrape(metrics_addr(c, i));
            assert!(status.ends_with("200 OK"), "{status}");
            parse(&body)
        })
        .collect()
}

#[test]
fn scraped_metrics_add_up_to_the_bytes_each_job_wrote_read_and_staged_out() {
    let c = Cluster::start(2, &["--metrics-port", "0"]);
    let size = (3 << 20) + 12345;
    let (writer, reader) = (4242, 4343);
    fs::write(c.local("ckpt"), pattern(1, size)).unwrap();
    as_job(&c, writer, &["cp", c.local("ckpt").to_str().unwrap(), "surge:/ckpt"]);
    assert_eq!(as_job(&c, reader, &["cat", "/ckpt"]), pattern(1, size));
    c.fails(&["cat", "/missing"]);

    let scrapes = scrape_all(&c, 2);
    let (writer, reader) = (writer.to_string(), reader.to_string());
    let size = size as f64;
    assert_eq!(total(&scrapes, "surge_io_bytes_total", &[("job", &writer), ("op", "write")]), size);
    assert_eq!(total(&scrapes, "surge_io_bytes_total", &[("job", &reader), ("op", "read")]), size);
    assert_eq!(total(&scrapes, "surge_io_bytes_total", &[("job", &writer), ("op", "read")]), 0.0);
    let writes = total(&scrapes, "surge_requests_total", &[("job", &writer), ("op", "write")]);
    assert!(writes >= 2.0, "the file spans both daemons: {writes} write requests");
    // Every write request's latency was observed, by the same daemons.
    let observed = total(&scrapes, "surge_request_duration_seconds_count", &[("op", "write")]);
    assert_eq!(observed, writes);
    for (i, s) in scrapes.iter().enumerate() {
        let daemon = i.to_string();
        let labelled = s.samples.iter().all(|s| s.labels.get("daemon") == Some(daemon.as_str()));
        assert!(labelled, "every sample of daemon {i} says so");
    }
    assert!(total(&scrapes, "surge_buffer_used_bytes", &[]) >= size);
    assert!(total(&scrapes, "surge_buffer_device_free_bytes", &[("daemon", "1")]) > 0.0);
    for job in [&writer, &reader] {
        assert_eq!(
            total(&scrapes, "surge_requests_waiting", &[("job", job)]),
            0.0,
            "nothing waits once job {job} ended"
        );
    }
    assert!(total(&scrapes, "surge_request_errors_total", &[("errno", "2")]) >= 1.0, "the missing file's ENOENT");
    assert_eq!(total(&scrapes, "surge_stage_out_pending_files", &[]), 1.0);

    c.ok(&["stage-out", "/ckpt"]);
    let scrapes = scrape_all(&c, 2);
    assert_eq!(total(&scrapes, "surge_stage_out_bytes_total", &[]), size, "each daemon's share, copied and verified");
    assert_eq!(total(&scrapes, "surge_stage_out_objects_total", &[]), 2.0);
    // Daemon 0 counts the unstaged files again at most once a second.
    eventually("the staged file no longer pending", Duration::from_secs(5), || {
        total(&scrape_all(&c, 2), "surge_stage_out_pending_files", &[]) == 0.0
    });
}

#[test]
fn metrics_ports_are_the_base_plus_the_daemons_index_and_other_paths_are_not_found() {
    let base = free_port_pair();
    let c = Cluster::unstarted();
    let out = start_with_metrics_port(&c, 2, base);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let started = String::from_utf8_lossy(&out.stdout);
    let said = format!("metrics for Prometheus: http://HOST:{base}/metrics to :{}/metrics", base + 1);
    assert!(started.contains(&said), "{started}");
    for i in 0..2 {
        assert_eq!(metrics_addr(&c, i), SocketAddr::from(([127, 0, 0, 1], base + i as u16)));
    }
    let mut stream = TcpStream::connect(metrics_addr(&c, 1)).unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.0 404") || reply.starts_with("HTTP/1.1 404"), "{reply}");
}

/// `surge start --daemons N --metrics-port BASE` for `c`, not started yet.
fn start_with_metrics_port(c: &Cluster, daemons: u32, base: u16) -> Output {
    let (n, base, buffer, pfs) = (daemons.to_string(), base.to_string(), c.buffer(), c.pfs());
    let (buffer, pfs) = (buffer.to_str().unwrap(), pfs.to_str().unwrap());
    c.surge_with(&["start", "--daemons", &n, "--metrics-port", &base, "--buffer", buffer, "--pfs", pfs])
}

/// A port whose successor was free too a moment ago.
fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no two free ports in a row on 127.0.0.1");
}

#[test]
fn a_metrics_port_taken_by_another_process_fails_the_start_naming_the_port() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = start_with_metrics_port(&Cluster::unstarted(), 1, port);
    assert!(!out.status.success(), "started though port {port} is taken");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("port {port} is taken by another process")) && err.contains("--metrics-port"),
        "{err}"
    );
}

#[test]
fn a_bad_metrics_address_is_refused_before_the_daemon_starts() {
    let surged = surge_bin().with_file_name("surged");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(surged)
        .args(["--index", "0", "--daemons", "1", "--secret-file", "none", "--cluster-id", "x", "--buffer"])
        .arg(dir.path().join("b"))
        .arg("--pfs")
        .arg(dir.path())
        .args(["--metrics", "localhost:http"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("expected IP:PORT, such as 127.0.0.1:9300"), "{err}");
    assert!(!dir.path().join("b").exists(), "nothing was created");
}

#[test]
fn surge_top_shows_the_write_bandwidth_of_the_job_that_writes() {
    let c = Cluster::start(2, &[]);
    let job = 777;
    fs::write(c.local("chunk"), pattern(2, 4 << 20)).unwrap();
    let stop = AtomicBool::new(false);
    let top = thread::scope(|scope| {
        // The job writes until top has taken its snapshots.
        scope.spawn(|| {
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                as_job(&c, job, &["cp", c.local("chunk").to_str().unwrap(), &format!("surge:/out{}", n % 4)]);
            }
        });
        let top = c.surge_with(&["top", "--iterations", "2", "--interval", "1"]);
        stop.store(true, Ordering::SeqCst);
        top
    });
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(top.status.success(), "{text}{}", String::from_utf8_lossy(&top.stderr));
    // Not a terminal: one table per snapshot, the second with rates.
    let tables: Vec<&str> = text.split("surge top: cluster").skip(1).collect();
    assert_eq!(tables.len(), 2, "{text}");
    let row =
        tables[1].lines().find(|l| l.split_whitespace().next() == Some("777")).unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    let write_mb_s: f64 = cells[2].parse().unwrap();
    assert!(write_mb_s > 0.0, "job 777 writes, yet top shows {write_mb_s} MB/s:\n{text}");
    assert!(tables[1].lines().any(|l| l.trim_start().starts_with("0 up")), "{text}");
}
