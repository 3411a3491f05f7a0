//! Supervision of the control-plane processes: start detached with a pid file, check, stop,
//! start again with the same arguments.
//!
//! Job: each component runs as its own process group (so it outlives `cargo xtask cluster up`
//! and a Ctrl-C in that terminal does not reach it), logs to `target/cluster/logs/<name>.log`,
//! and has `target/cluster/run/<name>.pid` and `<name>.args` (its command line, for
//! [`Component::restart`]).
//!
//! Invariant: a pid is only ever signalled when `/proc/<pid>/exe` is the binary we started from
//! `target/cluster/bin/`, so a stale pid file never hits a process that reused the number.

use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A component's files.
pub struct Component {
    /// Short name: `etcd`, `kube-apiserver`, ...
    pub name: &'static str,
    /// The binary it runs.
    pub binary: PathBuf,
    /// Its pid file.
    pub pid_file: PathBuf,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// Its arguments, as a JSON array, written by [`Component::start`].
    pub args_file: PathBuf,
    /// While this file exists, a supervisor does not start the component again
    /// ([`super::supervise()`]): a fault injector holds a component down with it.
    pub hold_file: PathBuf,
}

impl Component {
    /// Starts the component with `args`, detached, and records its pid.
    pub fn start(&self, args: &[String]) -> Result<u32> {
        self.start_with_env(args, &[])
    }

    /// [`Component::start`] with extra environment variables.
    pub fn start_with_env(&self, args: &[String], env: &[(&str, &str)]) -> Result<u32> {
        if let Some(pid) = self.running_pid() {
            bail!(
                "{} is already running (pid {pid}, {})",
                self.name,
                self.pid_file.display()
            );
        }
        let args_json = serde_json::to_string(args).context("cannot encode the arguments")?;
        std::fs::write(&self.args_file, args_json)
            .with_context(|| format!("cannot write {}", self.args_file.display()))?;
        let log = std::fs::File::create(&self.log)
            .with_context(|| format!("cannot create {}", self.log.display()))?;
        self.spawn(args, env, log)
    }

    /// Starts the component again with the arguments of its last [`Component::start`], its
    /// output appended to its log. The environment of [`Component::start_with_env`] is not
    /// recorded: the supervised components (the control plane's) are started without one.
    pub fn restart(&self) -> Result<u32> {
        let text = std::fs::read_to_string(&self.args_file)
            .with_context(|| format!("cannot read {}", self.args_file.display()))?;
        let args: Vec<String> = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a list of arguments", self.args_file.display()))?;
        if let Some(pid) = self.running_pid() {
            bail!("{} is already running (pid {pid})", self.name);
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        self.spawn(&args, &[], log)
    }

    fn spawn(&self, args: &[String], env: &[(&str, &str)], log: std::fs::File) -> Result<u32> {
        let err = log
            .try_clone()
            .with_context(|| format!("cannot reopen {}", self.log.display()))?;
        let child = Command::new(&self.binary)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        let pid = child.id();
        // The child is not waited for: it must outlive this process. It is reaped by whoever
        // inherits it (init) once this process ends; until then a stopped one is a zombie, which
        // `alive` treats as gone.
        drop(child);
        std::fs::write(&self.pid_file, format!("{pid}\n"))
            .with_context(|| format!("cannot write {}", self.pid_file.display()))?;
        Ok(pid)
    }

    /// The recorded pid, if that process is alive and still runs our binary.
    pub fn running_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(&self.pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (alive(pid) && runs(pid, &self.binary)).then_some(pid)
    }

    /// Stops the component: SIGTERM, then SIGKILL after `grace`; removes the pid file.
    pub fn stop(&self, grace: Duration) -> Result<bool> {
        let Some(pid) = self.running_pid() else {
            let _ = std::fs::remove_file(&self.pid_file);
            return Ok(false);
        };
        signal(pid, "TERM")?;
        let deadline = Instant::now() + grace;
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if alive(pid) {
            eprintln!(
                "{} (pid {pid}) still running {grace:?} after SIGTERM: SIGKILL",
                self.name
            );
            signal(pid, "KILL")?;
            let deadline = Instant::now() + Duration::from_secs(5);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_file(&self.pid_file);
        Ok(true)
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let start = all.len().saturating_sub(lines);
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            all.get(start..).unwrap_or_default().join("\n")
        )
    }
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    // Field 3 of /proc/<pid>/stat is the state; the command in field 2 may hold spaces, so read
    // after its closing parenthesis.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
        })
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Whether `pid` runs `binary` (compared after resolving both paths).
fn runs(pid: u32, binary: &Path) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let ours = std::fs::canonicalize(binary).ok();
    exe.is_some() && exe == ours
}

fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .context("cannot run kill")?;
    if !status.success() && alive(pid) {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

/// A loopback port nobody listens on right now, below the kernel's ephemeral range, and never
/// the same twice in one process.
///
/// Why below the range: the port is bound by a process started later (kube-controller-manager
/// binds its port seconds after the API server and etcd are up), and a port of the ephemeral
/// range (what `bind(:0)` gives) is the kernel's to hand to any outgoing connection or
/// `bind(:0)` meanwhile: a CI run beside a soak lost its controller manager to `bind: address
/// already in use` on such a port. The kernel hands out no port below the range on its own.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    /// How far into the candidate ports the next search starts; 0 until the first search.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start = ephemeral_range_start();
    let candidates = u32::from(ephemeral_start.saturating_sub(LOWEST_PORT));
    if candidates == 0 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a port")?;
        return Ok(listener.local_addr().context("no local address")?.port());
    }
    // Spread the searches of concurrent runs (two clusters, a test) over the candidates.
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
    let _ = NEXT.compare_exchange(
        0,
        seed % candidates + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..candidates {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % candidates;
        let Ok(port) = u16::try_from(u32::from(LOWEST_PORT) + offset) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free loopback port between {LOWEST_PORT} and {ephemeral_start}")
}

/// The lowest port [`free_port`] hands out: above the well-known and most registered services.
const LOWEST_PORT: u16 = 10_000;

/// The first port of the kernel's ephemeral range (`ip_local_port_range`), Linux's default when
/// it cannot be read.
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// `GET path` over plain HTTP/1.1 on loopback `port`: the status code and the body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_pid_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
    }

    #[test]
    fn runs_compares_the_executable() {
        let me = std::env::current_exe().ok();
        assert!(me.is_some_and(|exe| runs(std::process::id(), &exe)));
        assert!(!runs(std::process::id(), Path::new("/bin/true")));
    }

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ephemeral_start = ephemeral_range_start();
        let ports: Vec<u16> = (0..6).map(|_| free_port().unwrap()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!((LOWEST_PORT..ephemeral_start).contains(&port), "{port}");
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "{port}"
            );
        }
    }
}
