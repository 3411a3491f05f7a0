//! Helpers shared by the tests that run processes: the binary, Prometheus, promtool.
// Each test crate uses a subset of these.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Child, Command, Stdio};

/// Kills the child when the test ends, however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asserts that `promtool check metrics` accepts `exposition`; fails loudly when promtool is
/// missing.
pub fn promtool_check_metrics(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is missing: run `cargo xtask tools` (installs Debian's prometheus package)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{exposition}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `GET path` over HTTP/1.1 on `addr` (`host:port`), without a client library: the whole raw
/// response (status line, headers, body), or `None` when the connection or the read fails
/// (including after `read_timeout`).
pub fn http_get(addr: &str, path: &str, read_timeout: std::time::Duration) -> Option<String> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    Some(String::from_utf8_lossy(&raw).into_owned())
}
