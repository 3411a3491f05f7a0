//! Supervision of a running cluster, as the kubelet supervises a real control plane's static
//! pods: a component that exits is started again with the same arguments.
//!
//! Why: kube-controller-manager and kube-scheduler exit by design when they lose their leader
//! lease, which they do in any API server outage longer than their renew deadline
//! (docs/reliability.md, the chaos runs): without a supervisor, a fault in the API server stops
//! every DaemonSet and the chaos run measures the harness, not the controller.
//!
//! Invariants: a component whose hold file (`run/<name>.hold`) exists is not started again (a
//! fault injector holds a component down that way, then removes the file); one that exits again
//! within [`CRASH_WINDOW`] of a start waits before the next (1 s doubling to 10 s, the kubelet's
//! crash-loop back-off, shortened); every restart is
//! appended to `run/restarts.log` (`<unix seconds> <name> <pid>`) and said on stderr; the
//! supervisor thread stops when the [`Supervisor`] is dropped.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{COMPONENTS, Layout};

/// How often the components are checked.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// An exit this soon after a start counts as a crash loop.
const CRASH_WINDOW: Duration = Duration::from_secs(10);
/// The longest wait before starting a crash-looping component again.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The running supervisor; dropping it stops it.
pub struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Supervises every component of the cluster of `layout` until the returned value is dropped.
pub fn supervise(layout: &Layout) -> Supervisor {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let components: Vec<_> = COMPONENTS
        .iter()
        .map(|name| layout.component(name))
        .collect();
    let restarts = layout.run.join("restarts.log");
    let thread = std::thread::spawn(move || {
        // Per component: when it was last started, and the wait before the next start.
        let mut starts: Vec<(Option<Instant>, Duration)> =
            vec![(None, Duration::ZERO); components.len()];
        while !stopped.load(Ordering::Acquire) {
            for (component, (last, backoff)) in components.iter().zip(starts.iter_mut()) {
                if component.running_pid().is_some() || component.hold_file.exists() {
                    continue;
                }
                let now = Instant::now();
                if let Some(at) = *last {
                    if now.duration_since(at) < *backoff {
                        continue;
                    }
                    *backoff = if now.duration_since(at) < CRASH_WINDOW + *backoff {
                        (*backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF)
                    } else {
                        Duration::ZERO
                    };
                }
                *last = Some(now);
                match component.restart() {
                    Ok(pid) => {
                        eprintln!(
                            "==> supervisor: {} had exited; started again (pid {pid})",
                            component.name
                        );
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |since| since.as_secs());
                        if let Ok(mut log) = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&restarts)
                        {
                            let _ = writeln!(log, "{now} {} {pid}", component.name);
                        }
                    }
                    Err(error) => {
                        eprintln!(
                            "==> supervisor: cannot start {} again: {error:#}",
                            component.name
                        );
                    }
                }
            }
            std::thread::sleep(CHECK_EVERY);
        }
    });
    Supervisor {
        stop,
        thread: Some(thread),
    }
}
