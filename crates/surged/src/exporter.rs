//! The metrics endpoint (`surged --metrics ADDR`, off by default): answers
//! `GET /metrics` with the daemon's registry (`metrics`) in the OpenMetrics
//! text format, which Prometheus scrapes; the encoding is
//! `prometheus-client`'s.
//!
//! The port is open to anyone who can reach it, so the endpoint is bounded
//! to leave the daemon's descriptors and threads to the file service: at
//! most [`MAX_SCRAPES`] connections at once, each on a thread of its own,
//! given [`IO_TIMEOUT`] to send its request and take the answer, then
//! closed (one request per connection). When they are all taken, the
//! oldest is closed for the newcomer, as the file service does with
//! connections that have not authenticated: idle connections cannot keep a
//! scraper out, and a flood of them costs the daemon 16 descriptors, not
//! one each. A failing accept (out of descriptors) backs off, logged once,
//! and the endpoint serves again once descriptors are free. That is why
//! the few lines of HTTP/1.x it speaks are here rather than in `tiny_http`,
//! which took every connection on a thread of its own and stopped
//! listening at the first failed accept.

use crate::background::Backoff;
use crate::locking::lock;
use crate::logging::log;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;
use surge_proto::Errno;

/// What Prometheus asks for and gets: the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Most connections served at once (Prometheus scrapes one at a time).
pub const MAX_SCRAPES: usize = 16;
/// Time a connection has to send its request, and to take each part of the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head read (a scrape's is a few hundred bytes).
const MAX_REQUEST: usize = 8 << 10;

/// The endpoint, serving until [`Exporter::stop`].
pub struct Exporter {
    shared: Arc<Shared>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    listener: TcpListener,
    registry: Registry,
    index: u32,
    stopping: AtomicBool,
    open: Mutex<Open>,
}

/// The connections being served, oldest first. A socket stays open while
/// it is listed (its thread takes it off before closing it), so shutting
/// one down never hits a reused descriptor.
#[derive(Default)]
struct Open {
    next_id: u64,
    conns: VecDeque<(u64, RawFd)>,
}

impl Exporter {
    /// Serves `registry` on `listener` (bound by the caller, which reports
    /// a taken port) from a thread of its own.
    pub fn start(listener: TcpListener, index: u32, registry: Registry) -> io::Result<Exporter> {
        let addr = listener.local_addr()?;
        let shared =
            Arc::new(Shared { listener, registry, index, stopping: AtomicBool::new(false), open: Mutex::default() });
        let accepting = Arc::clone(&shared);
        let thread = thread::Builder::new().name(format!("surged{index}-metrics")).spawn(move || accept(&accepting))?;
        Ok(Exporter { shared, addr, thread: Some(thread) })
    }

    /// Where the endpoint serves (the bound port when port 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the accepting thread to end (answers
    /// under way finish on their own, within their timeout).
    pub fn stop(mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept call (Linux: a listening socket shut down for reading stops listening).
        crate::sys::shutdown_read(self.shared.listener.as_raw_fd());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until stopped, each served on a thread of its own.
fn accept(shared: &Arc<Shared>) {
    let index = shared.index;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let accepted = shared.listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                let retry = backoff.failed(Errno::from_io(&e));
                if retry.news {
                    log!(
                        Warn,
                        index,
                        "metrics endpoint: accepting a scrape failed: {e}; trying again in {:?}",
                        retry.delay
                    );
                }
                // Out of descriptors, most likely: let the open connections end.
                thread::sleep(retry.delay);
                continue;
            }
        };
        if let Some((failures, over)) = backoff.succeeded() {
            log!(Info, index, "metrics endpoint: accepting again after {failures} failure(s) over {over:.1?}");
        }
        let id = admit(shared, &stream);
        let serving = Arc::clone(shared);
        let spawned = thread::Builder::new().name(format!("surged{index}-scrape")).spawn(move || {
            serve(&stream, &serving.registry, index);
            lock(&serving.open).conns.retain(|&(open, _)| open != id);
            drop(stream);
        });
        if let Err(e) = spawned {
            lock(&shared.open).conns.retain(|&(open, _)| open != id);
            log!(Warn, index, "metrics endpoint: cannot start a thread for a scrape: {e}");
        }
    }
}

/// Lists a new connection, closing the oldest when [`MAX_SCRAPES`] are open.
fn admit(shared: &Shared, stream: &TcpStream) -> u64 {
    let mut open = lock(&shared.open);
    if open.conns.len() >= MAX_SCRAPES {
        if let Some((_, fd)) = open.conns.pop_front() {
            // SAFETY: shutdown only changes the state of the socket behind fd,
            // which stays open until its thread takes it off the list.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
    open.next_id += 1;
    let id = open.next_id;
    open.conns.push_back((id, stream.as_raw_fd()));
    id
}

/// Reads one request and answers it: the metrics for `GET /metrics`, else
/// 404, 405 or 400. A peer that is too slow or hung up gets nothing.
fn serve(stream: &TcpStream, registry: &Registry, index: u32) {
    let timeouts = stream.set_read_timeout(Some(IO_TIMEOUT)).and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)));
    if timeouts.is_err() {
        return;
    }
    let Some(head) = read_head(stream) else { return };
    let mut words = head.split(|&b| b == b' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, extra, body) = match (method, path) {
        (b"GET", b"/metrics") => {
            let mut text = String::new();
            match encode(&mut text, registry) {
                Ok(()) => ("200 OK", format!("Content-Type: {CONTENT_TYPE}\r\n"), text),
                Err(e) => {
                    log!(Error, index, "metrics endpoint: cannot encode the metrics: {e}");
                    ("500 Internal Server Error", String::new(), format!("cannot encode the metrics: {e}\n"))
                }
            }
        }
        (_, b"/metrics") => ("405 Method Not Allowed", "Allow: GET\r\n".into(), "only GET is served here\n".into()),
        (_, path) if path.starts_with(b"/") => {
            ("404 Not Found", String::new(), "surged serves its metrics at /metrics\n".into())
        }
        _ => ("400 Bad Request", String::new(), "not an HTTP request\n".into()),
    };
    let answer =
        format!("HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    // A scraper that hung up gets nothing: nobody to tell.
    let _ = (&mut &*stream).write_all(answer.as_bytes());
}

/// The request line of the request head (up to its blank line), or `None`
/// when the peer sent no complete head in time or more than [`MAX_REQUEST`].
fn read_head(stream: &TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = (&mut &*stream).read(&mut buf).ok().filter(|&n| n > 0)?;
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return None;
        }
    }
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    head.truncate(line_end);
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn serves_the_registry_at_slash_metrics_and_nothing_else() {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        registry.register("answers", "Answers given", counter.clone());
        counter.inc_by(42);
        let exporter = Exporter::start(TcpListener::bind("127.0.0.1:0").unwrap(), 0, registry).unwrap();
        let addr = exporter.addr();
        assert_ne!(addr.port(), 0);
        let reply = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("application/openmetrics-text") && reply.contains("\nanswers_total 42\n"), "{reply}");
        let reply = get(addr, "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
        let reply = get(addr, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
        exporter.stop();
        // The listener stops listening at once; the port goes with the last scrape's thread.
        surge_testkit::eventually("the port is released", Duration::from_secs(5), || TcpStream::connect(addr).is_err());
    }
}
