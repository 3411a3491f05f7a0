//! A TCP proxy on loopback between the controller and kube-apiserver: the controller's
//! kubeconfig names the proxy, TLS passes through untouched (the serving certificate names
//! 127.0.0.1), and the proxy can make the API server slow, lossy or silent.
//!
//! Modes ([`Mode`]): `Pass` forwards at once; `Slow` holds every chunk for a latency and cuts
//! every connection at an interval (as a congested or flapping network, or an overloaded load
//! balancer does); `Stall` accepts and holds everything (a partition that keeps connections
//! open). [`Proxy::cut_all`] closes every connection at once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// How the proxy treats traffic now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Hold each chunk `latency`, and cut every connection each `cut_every`.
    Slow {
        latency: Duration,
        cut_every: Duration,
    },
    /// Forward nothing (connections stay open).
    Stall,
}

#[derive(Default)]
struct Shared {
    mode: Option<Mode>,
    connections: Vec<AbortHandle>,
    accepted: u64,
    cut: u64,
}

/// The running proxy; stopped (every connection closed) when dropped.
pub struct Proxy {
    /// Where the controller connects.
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.cut_all();
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Mutex::new(Shared {
            mode: Some(Mode::Pass),
            ..Shared::default()
        }));
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let shared = accepting.clone();
                let task = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        // The API server is down: the client sees its connection closed.
                        return;
                    };
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let up = pump(client_read, server_write, shared.clone());
                    let down = pump(server_read, client_write, shared);
                    // Either direction ending ends the connection.
                    tokio::select! {
                        () = up => {}
                        () = down => {}
                    }
                });
                let mut state = lock(&accepting);
                state.accepted += 1;
                state.connections.retain(|c| !c.is_finished());
                state.connections.push(task.abort_handle());
            }
        });
        let cutting = shared.clone();
        // Cuts every connection at the interval of the `Slow` mode.
        let cutter = tokio::spawn(async move {
            let mut since_cut = Duration::ZERO;
            let tick = Duration::from_millis(100);
            loop {
                tokio::time::sleep(tick).await;
                let mode = lock(&cutting).mode;
                match mode {
                    Some(Mode::Slow { cut_every, .. }) => {
                        since_cut += tick;
                        if since_cut >= cut_every {
                            since_cut = Duration::ZERO;
                            cut(&cutting);
                        }
                    }
                    _ => since_cut = Duration::ZERO,
                }
            }
        });
        Self {
            addr,
            shared,
            tasks: vec![accept.abort_handle(), cutter.abort_handle()],
        }
    }

    /// Switches the mode; connections stay.
    pub fn set(&self, mode: Mode) {
        lock(&self.shared).mode = Some(mode);
    }

    /// Closes every connection now; returns how many.
    pub fn cut_all(&self) -> usize {
        cut(&self.shared)
    }

    /// Connections accepted so far, and connections cut.
    pub fn counts(&self) -> (u64, u64) {
        let state = lock(&self.shared);
        (state.accepted, state.cut)
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cut(shared: &Mutex<Shared>) -> usize {
    let mut state = lock(shared);
    let open: Vec<AbortHandle> = std::mem::take(&mut state.connections)
        .into_iter()
        .filter(|c| !c.is_finished())
        .collect();
    for connection in &open {
        connection.abort();
    }
    state.cut += open.len() as u64;
    open.len()
}

/// Copies `from` to `to`, chunk by chunk, as the mode says.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Mutex<Shared>>,
) {
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        loop {
            let mode = lock(&shared).mode;
            match mode {
                Some(Mode::Stall) => tokio::time::sleep(Duration::from_millis(50)).await,
                Some(Mode::Slow { latency, .. }) => {
                    tokio::time::sleep(latency).await;
                    break;
                }
                _ => break,
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
