//! Credentials of the local control plane, made with the openssl command-line tool.
//!
//! Job: a CA, the API server's serving certificate signed by it (loopback names and the first
//! service IP), the service-account signing key pair, and one admin bearer token (group
//! `system:masters`) in a token file, plus the kubeconfig that uses them.
//!
//! Invariants: everything is generated here, on this machine, once per `target/cluster/pki/`
//! (kept across `cluster down`/`up`, so a kubeconfig stays valid); nothing is downloaded; the
//! private keys never leave `target/`. The server listens on loopback only, so the token is a
//! test credential, not a secret.

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Paths of the generated credentials.
pub struct Pki {
    /// The CA that signed the serving certificate (clients trust it).
    pub ca_cert: PathBuf,
    /// Serving certificate and key of kube-apiserver.
    pub serving_cert: PathBuf,
    /// Private key of [`Pki::serving_cert`].
    pub serving_key: PathBuf,
    /// Service-account token signing key (kube-apiserver signs, kube-controller-manager too).
    pub sa_key: PathBuf,
    /// Its public key (kube-apiserver verifies with it).
    pub sa_pub: PathBuf,
    /// kube-apiserver's `--token-auth-file`.
    pub token_file: PathBuf,
    /// The admin bearer token.
    pub token: String,
}

impl Pki {
    /// Only what a kubeconfig needs: the CA and a bearer token (the other paths stay empty).
    pub fn for_token(ca_cert: PathBuf, token: &str) -> Self {
        Self {
            ca_cert,
            serving_cert: PathBuf::new(),
            serving_key: PathBuf::new(),
            sa_key: PathBuf::new(),
            sa_pub: PathBuf::new(),
            token_file: PathBuf::new(),
            token: token.to_owned(),
        }
    }
}

/// Creates the credentials in `dir` unless they are all there already.
pub fn ensure(dir: &Path) -> Result<Pki> {
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
        token_file: dir.join("tokens.csv"),
        token: String::new(),
    };
    let complete = [
        &pki.ca_cert,
        &pki.serving_cert,
        &pki.serving_key,
        &pki.sa_key,
        &pki.sa_pub,
        &pki.token_file,
    ]
    .iter()
    .all(|p| p.is_file());
    if !complete {
        generate(dir, &pki)?;
    }
    let tokens = std::fs::read_to_string(&pki.token_file)
        .with_context(|| format!("cannot read {}", pki.token_file.display()))?;
    let token = tokens
        .split(',')
        .next()
        .filter(|t| !t.is_empty())
        .with_context(|| format!("{} has no token", pki.token_file.display()))?
        .to_owned();
    Ok(Pki { token, ..pki })
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .context("cannot run openssl (Debian package openssl)")?;
    if !output.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn generate(dir: &Path, pki: &Pki) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // P-256 keys: generated at once, unlike RSA, and accepted by every component.
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "3650"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=daemonset-canary-local-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca)?;
    let mut csr = vec!["req", "-nodes"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        "-subj",
        "/CN=kube-apiserver",
    ]);
    openssl(dir, &csr)?;
    // The names clients use: loopback, and the in-cluster service name and IP (the first address
    // of --service-cluster-ip-range) that the API server itself advertises.
    std::fs::write(
        dir.join("apiserver.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
         DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1\n\
         extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
    )
    .context("cannot write apiserver.ext")?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "apiserver.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            "apiserver.ext",
            "-out",
            "apiserver.crt",
        ],
    )?;
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
            "sa.key",
        ],
    )?;
    openssl(dir, &["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
    let token = random_hex(16)?;
    std::fs::write(
        &pki.token_file,
        format!("{token},daemonset-canary-admin,daemonset-canary-admin,\"system:masters\"\n"),
    )
    .with_context(|| format!("cannot write {}", pki.token_file.display()))?;
    Ok(())
}

/// `bytes` random bytes from the kernel, as hex.
fn random_hex(bytes: usize) -> Result<String> {
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buffer))
        .context("cannot read /dev/urandom")?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

/// A kubeconfig for `server` with the admin token, trusting the CA.
pub fn kubeconfig(pki: &Pki, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: daemonset-canary-local\n  cluster:\n    \
         server: {server}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    \
         token: {token}\ncontexts:\n- name: daemonset-canary-local\n  context:\n    cluster: \
         daemonset-canary-local\n    user: admin\n    namespace: default\n\
         current-context: daemonset-canary-local\n",
        ca = pki.ca_cert.display(),
        token = pki.token,
    )
}
