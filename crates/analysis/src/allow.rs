//! Which analysis addresses the controller may send a query (and a Secret) to: the cluster
//! admin's choice (`daemonset-canary run --allow-analysis-address PREFIX`), not the author's
//! (issue 47: an address from the spec made the controller a port scanner and a query proxy,
//! and a `bearerTokenSecret` went to any `https://` host the author named).
//!
//! An address and a prefix are both parsed as URLs (the WHATWG parser of the `url` crate) and
//! compared by their parts, never as strings:
//!
//! - the scheme (`http` or `https`), exactly;
//! - the host, lower case (the parser does that), one trailing dot dropped (`prom.` is `prom`),
//!   IPv4 in any of its spellings (`127.1`, `0x7f.0.0.1`) as the address, IPv6 by its bits;
//! - the port, the scheme's default when none is written (`http://prom` is `http://prom:80`);
//! - the path, segment by segment once percent-decoded: `/prom` allows `/prom` and `/prom/x`,
//!   never `/prometheus` nor `/prom%2F..%2Fadmin`.
//!
//! Whatever its allow-list, an address is refused when it carries what a URL prefix cannot
//! judge: a user name or password (`http://prom:9090@evil` is the host `evil`), a query (`?`),
//! a fragment (`#`, which would drop the appended `/api/v1/query`), a `.` or `..` segment, an
//! encoded `/` or `\` in a segment.
//!
//! # Invariants
//!
//! - With no prefix, every address is refused; `*` allows any address of the right shape.
//! - The request goes to [`AnalysisAddress::query_uri`], built from the parsed URL that was
//!   judged, so that what was allowed and where the request goes cannot differ.

use std::net::{Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// The command-line flag (and its environment variable) that allows analysis addresses:
/// named in every refusal, so that the author knows whom to ask.
pub const ALLOW_FLAG: &str = "--allow-analysis-address";

/// The environment variable of [`ALLOW_FLAG`] (comma-separated).
pub const ALLOW_ENV: &str = "CANARY_ALLOW_ANALYSIS_ADDRESS";

/// Why an address or a prefix is not a URL that can be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Not a URL at all, or not http(s).
    #[error("{0:?} is not an http:// or https:// URL")]
    NotHttp(String),
    /// `user@host` or `user:password@host`.
    #[error("{0:?} has a user name or password before the host (user@host): leave them out")]
    UserInfo(String),
    /// A `?query`.
    #[error("{0:?} has a query (?): an analysis address is scheme, host, port and path")]
    Query(String),
    /// A `#fragment`.
    #[error("{0:?} has a fragment (#): an analysis address is scheme, host, port and path")]
    Fragment(String),
    /// A path segment that would change the path once decoded.
    #[error(
        "{0:?} has a path segment that is . or .., or holds an encoded / or \\ or a control character"
    )]
    Path(String),
}

/// A parsed analysis address (or prefix): the parts it is judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalysisAddress {
    url: Url,
    host: HostKey,
    port: u16,
    /// Percent-decoded, without empty segments at the end (`/prom/` is `/prom`).
    segments: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostKey {
    Domain(String),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl AnalysisAddress {
    /// Parses `text` (see the module docs for what is refused).
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        let not_http = || AddressError::NotHttp(text.to_owned());
        let url = Url::parse(text).map_err(|_| not_http())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(not_http());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(AddressError::UserInfo(text.to_owned()));
        }
        if url.query().is_some() {
            return Err(AddressError::Query(text.to_owned()));
        }
        if url.fragment().is_some() {
            return Err(AddressError::Fragment(text.to_owned()));
        }
        let host = match url.host() {
            Some(Host::Domain(domain)) => {
                let domain = domain.strip_suffix('.').unwrap_or(domain);
                if domain.is_empty() {
                    return Err(not_http());
                }
                HostKey::Domain(domain.to_owned())
            }
            Some(Host::Ipv4(ip)) => HostKey::V4(ip),
            Some(Host::Ipv6(ip)) => HostKey::V6(ip),
            None => return Err(not_http()),
        };
        let port = url.port_or_known_default().ok_or_else(not_http)?;
        let mut segments = Vec::new();
        for raw in url.path_segments().into_iter().flatten() {
            let decoded = percent_decode(raw).ok_or_else(|| AddressError::Path(text.to_owned()))?;
            if decoded == "."
                || decoded == ".."
                || decoded.contains(['/', '\\'])
                || decoded.chars().any(char::is_control)
            {
                return Err(AddressError::Path(text.to_owned()));
            }
            segments.push(decoded);
        }
        while segments.last().is_some_and(String::is_empty) {
            segments.pop();
        }
        Ok(AnalysisAddress {
            url,
            host,
            port,
            segments,
        })
    }

    /// Whether `self`, as a prefix, allows `address`: same scheme, host and port, and
    /// `address`'s path starts with `self`'s, segment by segment.
    pub fn allows(&self, address: &AnalysisAddress) -> bool {
        self.url.scheme() == address.url.scheme()
            && self.host == address.host
            && self.port == address.port
            && address.segments.starts_with(&self.segments)
    }

    /// `<address>/api/v1/query`, from the parsed URL (the one judged).
    pub fn query_uri(&self) -> Result<hyper::Uri, AddressError> {
        let mut url = self.url.clone();
        let path = format!("{}/api/v1/query", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url.as_str()
            .parse()
            .map_err(|_| AddressError::NotHttp(self.url.to_string()))
    }

    /// Whether the address is `https://`.
    pub fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }
}

impl std::fmt::Display for AnalysisAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.url.as_str())
    }
}

/// `%XX` decoded, or `None` when the result is not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (byte, hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).ok()?);
                index += 3;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The analysis addresses this controller may send queries (and Secrets) to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedAddresses {
    any: bool,
    prefixes: Vec<AnalysisAddress>,
}

/// Why an address may not be used: the message names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    /// Not a URL this controller can judge.
    #[error("{0}")]
    Shape(#[from] AddressError),
    /// A fine URL, outside every allowed prefix.
    #[error(
        "{address:?} is not allowed: the controller's administrator allows analysis addresses with {ALLOW_FLAG} (env {ALLOW_ENV}); {allowed}"
    )]
    Outside {
        /// The address refused.
        address: String,
        /// What is allowed, in words.
        allowed: String,
    },
}

impl AllowedAddresses {
    /// No address: every analysis is refused (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// Any address of the right shape (`*`).
    pub fn any() -> Self {
        Self {
            any: true,
            prefixes: Vec::new(),
        }
    }

    /// The flag's values: each a prefix, or `*` for any; a value of the environment variable
    /// may hold several, comma-separated (empty parts are skipped).
    pub fn from_flags<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Self, AddressError> {
        let mut allowed = Self::none();
        for value in values.into_iter().flat_map(|v| v.split(',')) {
            let value = value.trim();
            match value {
                "" => {}
                "*" => allowed.any = true,
                prefix => allowed.prefixes.push(AnalysisAddress::parse(prefix)?),
            }
        }
        Ok(allowed)
    }

    /// Whether no address is allowed.
    pub fn is_none(&self) -> bool {
        !self.any && self.prefixes.is_empty()
    }

    /// `address`, parsed, when it is allowed; why not otherwise.
    pub fn check(&self, address: &str) -> Result<AnalysisAddress, NotAllowed> {
        let parsed = AnalysisAddress::parse(address)?;
        if self.any || self.prefixes.iter().any(|prefix| prefix.allows(&parsed)) {
            return Ok(parsed);
        }
        let allowed = if self.prefixes.is_empty() {
            "it allows none".to_owned()
        } else {
            let list: Vec<String> = self.prefixes.iter().map(ToString::to_string).collect();
            format!("it allows {}", list.join(", "))
        };
        Err(NotAllowed::Outside {
            address: address.to_owned(),
            allowed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(prefixes: &[&str]) -> AllowedAddresses {
        AllowedAddresses::from_flags(prefixes.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn allows(prefixes: &[&str], address: &str) -> bool {
        allowed(prefixes).check(address).is_ok()
    }

    #[test]
    fn none_allows_nothing_and_says_which_flag() {
        let error = AllowedAddresses::none()
            .check("http://prometheus.monitoring:9090")
            .unwrap_err()
            .to_string();
        assert!(error.contains(ALLOW_FLAG), "{error}");
        assert!(error.contains(ALLOW_ENV), "{error}");
        assert!(error.contains("allows none"), "{error}");
    }

    #[test]
    fn a_prefix_allows_its_scheme_host_port_and_path_only() {
        let prom = ["http://prometheus.monitoring:9090"];
        assert!(allows(&prom, "http://prometheus.monitoring:9090"));
        assert!(allows(&prom, "http://prometheus.monitoring:9090/"));
        assert!(allows(&prom, "http://prometheus.monitoring:9090/sub/path"));
        assert!(allows(&prom, "HTTP://Prometheus.Monitoring:9090"));
        assert!(allows(&prom, "http://prometheus.monitoring.:9090"));
        assert!(!allows(&prom, "https://prometheus.monitoring:9090"));
        assert!(!allows(&prom, "http://prometheus.monitoring:9091"));
        assert!(!allows(&prom, "http://prometheus.monitoring"));
        assert!(!allows(&prom, "http://prometheus.monitoring.evil:9090"));
        assert!(!allows(&prom, "http://evil/prometheus.monitoring:9090"));
        // Default ports, both ways.
        assert!(allows(&["http://prom"], "http://prom:80"));
        assert!(allows(&["https://prom:443"], "https://prom"));
        assert!(!allows(&["http://prom"], "http://prom:8080"));
    }

    #[test]
    fn the_path_is_compared_by_decoded_segments() {
        let prefix = ["http://gateway/prom"];
        assert!(allows(&prefix, "http://gateway/prom"));
        assert!(allows(&prefix, "http://gateway/prom/"));
        assert!(allows(&prefix, "http://gateway/prom/tenant-a"));
        assert!(allows(&prefix, "http://gateway/%70rom"));
        assert!(!allows(&prefix, "http://gateway/prometheus"));
        assert!(!allows(&prefix, "http://gateway/"));
        // Dot segments are resolved by the parser (and then fall outside), or refused.
        assert!(!allows(&prefix, "http://gateway/prom/../admin"));
        assert!(!allows(&prefix, "http://gateway/prom/%2e%2e/admin"));
        assert!(!allows(&prefix, "http://gateway/prom%2F..%2Fadmin"));
        assert!(!allows(&prefix, "http://gateway/prom/%2F/admin"));
        assert!(!allows(&prefix, "http://gateway/prom/%5C..%5Cadmin"));
    }

    #[test]
    fn what_a_prefix_cannot_judge_is_refused_even_under_a_star() {
        let any = AllowedAddresses::any();
        for address in [
            "http://prometheus.monitoring:9090@evil",
            "http://prometheus.monitoring:9090@evil:9090",
            "http://user@prometheus.monitoring:9090",
            "http://prometheus.monitoring:9090/?x=1",
            "http://prometheus.monitoring:9090#",
            "http://prometheus.monitoring:9090/admin#",
            "ftp://prometheus.monitoring",
            "file:///etc/passwd",
            "prometheus.monitoring:9090",
            "http://",
        ] {
            assert!(any.check(address).is_err(), "{address}");
        }
        let userinfo = allowed(&["http://prometheus.monitoring:9090"])
            .check("http://prometheus.monitoring:9090@evil")
            .unwrap_err()
            .to_string();
        assert!(userinfo.contains("user name or password"), "{userinfo}");
        assert!(any.check("http://anything.example:1234/x").is_ok());
    }

    #[test]
    fn ip_addresses_are_compared_by_value() {
        assert!(allows(&["http://127.0.0.1:9090"], "http://127.1:9090"));
        assert!(allows(&["http://127.0.0.1:9090"], "http://0x7f.0.0.1:9090"));
        assert!(allows(&["http://[::1]:9090"], "http://[0:0:0:0::1]:9090"));
        assert!(!allows(&["http://[::1]:9090"], "http://[::2]:9090"));
        assert!(!allows(&["http://127.0.0.1:9090"], "http://127.0.0.2:9090"));
    }

    #[test]
    fn the_environment_form_is_comma_separated_and_the_request_goes_where_judged() {
        let list = allowed(&["http://a:1, http://b:2/x,", "*"]);
        assert!(list.any && list.prefixes.len() == 2);
        assert!(AllowedAddresses::from_flags(["http://a@b"]).is_err());
        assert!(AllowedAddresses::from_flags(["", " "]).map(|a| a.is_none()) == Ok(true));
        let address = allowed(&["http://prom:9090"])
            .check("HTTP://PROM.:9090/")
            .unwrap_or_else(|e| panic!("{e}"));
        let uri = address.query_uri().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(uri.host(), Some("prom."));
        assert_eq!(uri.port_u16(), Some(9090));
        assert_eq!(uri.path(), "/api/v1/query");
        let v6 = AnalysisAddress::parse("http://[::1]/p/")
            .and_then(|a| a.query_uri())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v6.to_string(), "http://[::1]/p/api/v1/query");
    }
}
