//! The opt-in request trace (issue 45): with `DST_TRACE_DIR=DIR`, each seed writes every request
//! its controller replicas send, in the order each replica sent it, to `DIR/seed-<seed>.trace`.
//!
//! A line is one request: the virtual time it was sent at (milliseconds since the seed's start),
//! the method, the path with its query, and the body as sent (one line: a newline in it is
//! written `\n`). The requests of each replica form one section (`== replica N`), whichever term
//! of that replica sent them; the harness marks a replica's starts and stops in it (`-- ...`).
//! The seeds replay exactly on virtual time, so two runs of one seed on one code give the same
//! file, and two codes that send the same requests at the same times give the same file: `cargo
//! xtask traces record` and `cargo xtask traces compare` rest on it (a change that claims to
//! change no behaviour is trace-identical on the seeds compared).
//!
//! A request's body is read when the request is sent, before the simulator sees it: the
//! controller's bodies are buffered (kube sends whole JSON documents), so reading them takes no
//! await and leaves the timing of the run unchanged.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::Body;

/// The variable that turns the trace on: the directory the seeds' files go to.
pub const TRACE_DIR_VAR: &str = "DST_TRACE_DIR";

/// The lines recorded of each replica, by replica.
type Lines = Arc<Mutex<BTreeMap<usize, Vec<String>>>>;

/// The requests of one seed, per replica; off (and free) unless [`TRACE_DIR_VAR`] is set.
#[derive(Debug, Clone, Default)]
pub struct RequestTrace(Option<Lines>);

impl RequestTrace {
    /// A trace that records when [`TRACE_DIR_VAR`] is set.
    pub fn from_env() -> Self {
        match trace_dir() {
            Some(_) => Self(Some(Arc::default())),
            None => Self(None),
        }
    }

    /// Whether requests are recorded.
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    fn push(&self, replica: usize, line: String) {
        if let Some(lines) = &self.0 {
            let mut lines = lines.lock().unwrap_or_else(|p| p.into_inner());
            lines.entry(replica).or_default().push(line);
        }
    }

    /// Records `request` of `replica`, sent at `at`, and gives it back with its body read
    /// (the body of a recorded request must be buffered: see the module doc).
    pub fn record<B>(
        &self,
        replica: usize,
        at: Duration,
        request: Request<B>,
    ) -> Request<http_body_util::Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = request.into_parts();
        let bytes = buffered(body).unwrap_or_else(|why| {
            panic!(
                "the request trace reads bodies as they are sent: {} {}: {why}",
                parts.method, parts.uri
            )
        });
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
        let mut line = format!("{:>10}ms {} {path}", at.as_millis(), parts.method);
        if !bytes.is_empty() {
            let text = String::from_utf8_lossy(&bytes);
            let _ = write!(line, " {}", text.replace('\n', "\\n"));
        }
        self.push(replica, line);
        Request::from_parts(parts, http_body_util::Full::new(bytes))
    }

    /// Marks an event of `replica` (started, stopped) in its section.
    pub fn mark(&self, replica: usize, at: Duration, what: &str) {
        self.push(replica, format!("-- {:>7}ms {what}", at.as_millis()));
    }

    /// Writes the seed's file (`DIR/seed-<seed>.trace`) when the trace is on; `heading` opens
    /// it (the plan's one line).
    pub fn write(&self, seed: u64, heading: &str) -> std::io::Result<()> {
        let (Some(lines), Some(dir)) = (&self.0, trace_dir()) else {
            return Ok(());
        };
        let lines = lines.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = format!("# {heading}\n");
        for (replica, requests) in lines.iter() {
            let _ = writeln!(text, "== replica {replica}");
            for line in requests {
                text.push_str(line);
                text.push('\n');
            }
        }
        std::fs::create_dir_all(&dir)?;
        std::fs::write(seed_file(&dir, seed), text)
    }
}

fn trace_dir() -> Option<PathBuf> {
    std::env::var_os(TRACE_DIR_VAR)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// The file of `seed` in `dir` (the seed zero-padded, so that a listing is in seed order).
pub fn seed_file(dir: &Path, seed: u64) -> PathBuf {
    dir.join(format!("seed-{seed:010}.trace"))
}

/// The whole of `body`, read without waiting: `Err` when it is not all there yet.
fn buffered<B>(body: B) -> Result<Bytes, String>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let mut body = std::pin::pin!(body);
    let mut context = Context::from_waker(Waker::noop());
    let mut whole = Vec::new();
    loop {
        match body.as_mut().poll_frame(&mut context) {
            Poll::Ready(None) => return Ok(Bytes::from(whole)),
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    whole.extend_from_slice(&data);
                }
            }
            Poll::Ready(Some(Err(error))) => return Err(error.to_string()),
            Poll::Pending => return Err("the body is streamed, not buffered".to_owned()),
        }
    }
}
