//! The metrics endpoint (`surged --metrics ADDR`, off by default): answers
//! `GET /metrics` with the daemon's registry (`metrics`) in the OpenMetrics
//! text format, which Prometheus scrapes. `tiny_http` serves it: a small
//! blocking HTTP server on threads of its own, which fits a daemon that
//! has no async runtime; the encoding is `prometheus-client`'s.

use crate::log;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response};

/// What Prometheus asks for and gets: the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The endpoint, serving until [`Exporter::stop`].
pub struct Exporter {
    http: Arc<tiny_http::Server>,
    stopping: Arc<AtomicBool>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Serves `registry` on `listener` (bound by the caller, which reports
    /// a taken port) from a thread of its own.
    pub fn start(listener: TcpListener, index: u32, registry: Registry) -> io::Result<Exporter> {
        let addr = listener.local_addr()?;
        let http = Arc::new(tiny_http::Server::from_listener(listener, None).map_err(io::Error::other)?);
        let stopping = Arc::new(AtomicBool::new(false));
        let (server, stop) = (Arc::clone(&http), Arc::clone(&stopping));
        let thread = thread::Builder::new().name(format!("surged{index}-metrics")).spawn(move || loop {
            match server.recv() {
                Ok(request) => answer(request, &registry, index),
                Err(_) if stop.load(Ordering::SeqCst) => return,
                Err(e) => {
                    log!(Warn, index, "metrics endpoint: accepting a scrape failed: {e}");
                    // Out of descriptors, most likely: let the open connections end.
                    thread::sleep(Duration::from_millis(100));
                }
            }
        })?;
        Ok(Exporter { http, stopping, addr, thread: Some(thread) })
    }

    /// Where the endpoint serves (the bound port when port 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the thread to end.
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.http.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one HTTP request: the metrics for `GET /metrics`, else 404 or 405.
fn answer(request: Request, registry: &Registry, index: u32) {
    let path = request.url().split('?').next().unwrap_or_default();
    let response = match (request.method(), path) {
        (Method::Get, "/metrics") => {
            let mut text = String::new();
            match encode(&mut text, registry) {
                Ok(()) => Response::from_string(text).with_header(header("Content-Type", CONTENT_TYPE)),
                Err(e) => {
                    log!(Error, index, "metrics endpoint: cannot encode the metrics: {e}");
                    Response::from_string(format!("cannot encode the metrics: {e}\n")).with_status_code(500)
                }
            }
        }
        (_, "/metrics") => {
            Response::from_string("only GET is served here\n").with_status_code(405).with_header(header("Allow", "GET"))
        }
        _ => Response::from_string("surged serves its metrics at /metrics\n").with_status_code(404),
    };
    // A scraper that hung up gets nothing: nobody to tell.
    let _ = request.respond(response);
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a constant ASCII header")
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
        // tiny_http's accept thread lets go of the port once it saw the stop.
        surge_testkit::eventually("the port is released", Duration::from_secs(5), || TcpStream::connect(addr).is_err());
    }
}
