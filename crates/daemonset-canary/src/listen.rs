//! Listening addresses as users write them, and what to say when one cannot be bound.
//!
//! - [`parse_listen_addr`]: `127.0.0.1:9090`, `[::1]:9090`, `0.0.0.0:8080`, and host names
//!   (`localhost:9090`), resolved once at start; IPv4 is preferred when a name has both
//!   (`localhost` is `127.0.0.1` then, as most users mean it).
//! - [`bind_error`]: a port in use says which process holds it, when the system tells
//!   (Linux: `/proc/net/tcp{,6}` gives the listening socket's inode, `/proc/<pid>/fd` its
//!   owner; processes of other users are not readable, so this is best effort), and suggests
//!   `127.0.0.1:0` (any free port, printed at start).

use std::net::{SocketAddr, ToSocketAddrs};

/// Parses a listening address: an IP and port, or a host name and port.
///
/// # Errors
///
/// A message for clap when `text` has no port or the name does not resolve.
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let resolved: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("expected HOST:PORT (e.g. 127.0.0.1:8080 or localhost:8080): {e}"))?
        .collect();
    resolved
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(|| format!("{text} resolves to no address"))
}

/// One line for a failed bind of `addr`: for a port in use, who holds it (when the system says)
/// and what to do instead.
pub fn bind_error(addr: SocketAddr, error: &std::io::Error) -> String {
    if error.kind() != std::io::ErrorKind::AddrInUse {
        return format!("cannot listen on {addr}: {error}");
    }
    let holder = listening_process(addr.port())
        .map(|(pid, name)| format!(" by {name} (pid {pid})"))
        .unwrap_or_default();
    format!(
        "cannot listen on {addr}: the port is already in use{holder}; choose another port, or 127.0.0.1:0 for any free one"
    )
}

/// The process listening on TCP `port`, as `(pid, command name)`, when `/proc` tells.
fn listening_process(port: u16) -> Option<(u32, String)> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| listening_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let sockets: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for process in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
        });
        if holds {
            let name = std::fs::read_to_string(process.path().join("comm"))
                .map(|n| n.trim().to_owned())
                .unwrap_or_else(|_| "a process".to_owned());
            return Some((pid, name));
        }
    }
    None
}

/// The inodes of the sockets listening on `port` in a `/proc/net/tcp` table.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let state = fields.get(3)?;
            let inode = fields.get(9)?.parse::<u64>().ok()?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (*state == LISTEN && local_port == port && inode != 0).then_some(inode)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_resolve_and_prefer_ipv4() {
        assert_eq!(
            parse_listen_addr("localhost:9090"),
            Ok("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("[::1]:80"),
            Ok("[::1]:80".parse().unwrap())
        );
        assert!(parse_listen_addr("localhost").is_err(), "no port");
        assert!(parse_listen_addr("not-an-address").is_err());
    }

    #[test]
    fn the_listening_socket_of_a_port_is_found_in_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0\n\
            1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0 100 0 0 10 0\n\
            2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0 100 0 0 10 0\n";
        assert_eq!(
            listening_inodes(table, 8080),
            [4242],
            "listening only, port 0x1F90"
        );
        assert_eq!(listening_inodes(table, 22), [17]);
        assert!(listening_inodes(table, 9090).is_empty());
    }

    #[test]
    fn a_port_in_use_names_its_holder_and_suggests_any_free_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let error = std::net::TcpListener::bind(addr).unwrap_err();
        let message = bind_error(addr, &error);
        assert!(message.contains("already in use"), "{message}");
        assert!(message.contains("127.0.0.1:0"), "{message}");
        // This test process holds it.
        assert!(
            message.contains(&format!("(pid {})", std::process::id())),
            "{message}"
        );
    }
}
