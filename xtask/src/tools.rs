//! External tools the tests need, installed when missing.
//!
//! Tests that need a tool never skip when it is absent: they fail. This module makes sure the tools
//! are there first. As root it installs Debian packages with apt-get and the pinned Python tools
//! into a virtualenv under the target directory; otherwise it stops with the exact command to run.
//! kubectl is not a Debian package: it is built from Kubernetes' sources with the local cluster's
//! binaries (`cargo xtask cluster build`, cached) into `target/cluster/bin/`, which `.ci/run`
//! puts first on PATH; the tests are told its path in `KUBECTL`. Helm is built the same way, on
//! first use (`cluster::ensure_helm`). The cargo subcommands (cargo-nextest, cargo-deny) are
//! installed from the crates registry with `cargo install --locked`.

use crate::cargo;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;
use xshell::{Shell, cmd};

/// A tool found on PATH, or the Debian package that provides it.
struct Tool {
    binary: &'static str,
    debian_package: &'static str,
}

/// Everything the test suite runs besides cargo.
const TOOLS: &[Tool] = &[
    Tool {
        binary: "promtool",
        debian_package: "prometheus",
    },
    Tool {
        binary: "prometheus",
        debian_package: "prometheus",
    },
];

/// Python tools of `cargo xtask lint-deploy`, pinned, installed from PyPI into [`venv_dir`].
/// kubernetes-validate 1.37 carries the schemas of Kubernetes 1.25 to 1.37 (we check 1.33);
/// cel-python evaluates the CRD's CEL rules on the example CanaryDaemonSets.
const PYTHON_TOOLS: &[(&str, &str)] = &[
    ("kubernetes-validate", "1.37.0"),
    ("checkov", "3.3.30"),
    ("cel-python", "0.5.0"),
];

/// cargo-deny, pinned: its configuration format (deny.toml) changes between releases.
const CARGO_DENY_VERSION: &str = "0.20.2";

/// Ensures every tool in [`TOOLS`], kubectl and Helm, the Python tools, cargo-nextest and
/// cargo-deny are available.
pub fn ensure_all() -> Result<()> {
    let sh = Shell::new()?;
    ensure_debian_tools(&sh)?;
    ensure_kubectl()?;
    ensure_helm()?;
    ensure_python_tools(&sh)?;
    ensure_nextest(&sh)?;
    ensure_cargo_deny(&sh).map(|_| ())
}

/// Builds Helm (cached in `target/cluster/bin/`) and returns it.
pub fn ensure_helm() -> Result<PathBuf> {
    let helm = crate::cluster::ensure_helm()?;
    eprintln!(
        "tool {:<12} {} ({})",
        "helm",
        version_line(&helm.display().to_string()),
        helm.display()
    );
    Ok(helm)
}

/// Installs cargo-deny [`CARGO_DENY_VERSION`] unless exactly that version is there.
pub fn ensure_cargo_deny(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    let installed = cmd!(sh, "{cargo} deny --version")
        .quiet()
        .ignore_stderr()
        .read()
        .unwrap_or_default();
    // `cargo-deny 0.20.2`
    if installed.split_whitespace().nth(1) == Some(CARGO_DENY_VERSION) {
        eprintln!("tool {:<12} {installed}", "cargo-deny");
        return Ok(());
    }
    eprintln!("installing cargo-deny {CARGO_DENY_VERSION}");
    cmd!(
        sh,
        "{cargo} install --locked cargo-deny --version {CARGO_DENY_VERSION}"
    )
    .run()
    .context("cargo install cargo-deny failed")?;
    Ok(())
}

/// Ensures what `cargo xtask lint-deploy` runs: kubectl, promtool and the Python tools.
/// Returns the virtualenv's `bin` directory.
pub fn ensure_deploy_tools() -> Result<PathBuf> {
    let sh = Shell::new()?;
    ensure_debian_tools(&sh)?;
    ensure_kubectl()?;
    ensure_python_tools(&sh)
}

/// Builds kubectl (cached) and checks that a kubectl is on PATH for the steps that run it by
/// name (`kubectl kustomize`). Returns the built one, which the tests get in `KUBECTL`.
pub fn ensure_kubectl() -> Result<PathBuf> {
    let built = crate::cluster::ensure_kubectl()?;
    if !on_path("kubectl") {
        let dir = built.parent().unwrap_or(&built).display().to_string();
        bail!(
            "kubectl is built at {} but not on PATH; run: export PATH={dir}:$PATH (.ci/run does)",
            built.display()
        );
    }
    eprintln!(
        "tool {:<12} {} ({})",
        "kubectl",
        version_line(&built.display().to_string()),
        built.display()
    );
    Ok(built)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set, else `target` in the workspace root
/// (the current directory of every xtask command).
pub fn target_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let cwd = std::env::current_dir().context("no current directory")?;
    Ok(cwd.join(dir))
}

/// The virtualenv of the Python tools.
fn venv_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("xtask-venv"))
}

fn ensure_debian_tools(sh: &Shell) -> Result<()> {
    let missing: Vec<&Tool> = TOOLS.iter().filter(|t| !on_path(t.binary)).collect();
    if !missing.is_empty() {
        let mut packages: Vec<&str> = missing.iter().map(|t| t.debian_package).collect();
        packages.dedup();
        apt_install(sh, &packages)?;
    }
    for tool in TOOLS {
        if !on_path(tool.binary) {
            bail!(
                "{} is still missing after installing {}",
                tool.binary,
                tool.debian_package
            );
        }
        eprintln!("tool {:<12} {}", tool.binary, version_line(tool.binary));
    }
    Ok(())
}

/// Installs [`PYTHON_TOOLS`] into the virtualenv unless exactly those versions are there already.
fn ensure_python_tools(sh: &Shell) -> Result<PathBuf> {
    let venv = venv_dir()?;
    let bin = venv.join("bin");
    let pins: Vec<String> = PYTHON_TOOLS
        .iter()
        .map(|(name, version)| format!("{name}=={version}"))
        .collect();
    if installed_python_tools(&bin) == pins {
        for pin in &pins {
            eprintln!("tool {pin} (in {})", venv.display());
        }
        return Ok(bin);
    }
    let venv_text = venv.display().to_string();
    if !is_root() {
        bail!(
            "missing Python tools; run: python3 -m venv {venv_text} && {venv_text}/bin/pip install {}",
            pins.join(" ")
        );
    }
    if cmd!(sh, "python3 -m venv --help")
        .quiet()
        .ignore_stdout()
        .run()
        .is_err()
    {
        apt_install(sh, &["python3", "python3-venv"])?;
    }
    eprintln!("installing {} into {venv_text}", pins.join(" "));
    cmd!(sh, "python3 -m venv {venv}")
        .run()
        .context("python3 -m venv failed")?;
    let pip = bin.join("pip");
    let pins_to_install = pins.clone();
    cmd!(
        sh,
        "{pip} install --quiet --disable-pip-version-check {pins_to_install...}"
    )
    .run()
    .context("pip install of the Python tools failed")?;
    let installed = installed_python_tools(&bin);
    if installed != pins {
        bail!("after pip install the virtualenv has {installed:?}, expected {pins:?}");
    }
    Ok(bin)
}

/// `name==version` of each of [`PYTHON_TOOLS`] installed in the virtualenv at `bin` (empty when
/// the virtualenv or a tool is missing).
fn installed_python_tools(bin: &std::path::Path) -> Vec<String> {
    let names: Vec<&str> = PYTHON_TOOLS.iter().map(|(name, _)| *name).collect();
    let script = format!(
        "import importlib.metadata as m\nfor n in {names:?}: print(f'{{n}}=={{m.version(n)}}')"
    );
    Command::new(bin.join("python"))
        .args(["-c", &script])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn on_path(binary: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn version_line(binary: &str) -> String {
    let args: &[&str] = if binary.ends_with("kubectl") {
        &["version", "--client"]
    } else if binary.ends_with("helm") {
        &["version", "--short"]
    } else {
        &["--version"]
    };
    Command::new(binary)
        .args(args)
        .output()
        .ok()
        .and_then(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8(text).ok()
        })
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "(version unknown)".to_owned())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

fn apt_install(sh: &Shell, packages: &[&str]) -> Result<()> {
    let list = packages.join(" ");
    if !is_root() {
        bail!(
            "missing Debian packages; run: sudo apt-get update && sudo apt-get install -y --no-install-recommends {list}"
        );
    }
    eprintln!("installing Debian packages: {list}");
    let _frontend = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
    cmd!(sh, "apt-get update -qq")
        .run()
        .context("apt-get update failed")?;
    cmd!(
        sh,
        "apt-get install -y -qq --no-install-recommends {packages...}"
    )
    .run()
    .with_context(|| format!("apt-get install {list} failed"))?;
    // The prometheus package starts a service on install where an init system runs; the tests start
    // their own server on a free port, so a leftover daemon is harmless but unwanted.
    let _ = cmd!(
        sh,
        "sh -c 'command -v service >/dev/null && service prometheus stop || true'"
    )
    .quiet()
    .ignore_status()
    .ignore_stderr()
    .run();
    Ok(())
}

fn ensure_nextest(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    if cmd!(sh, "{cargo} nextest --version")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .is_ok()
    {
        return Ok(());
    }
    eprintln!("installing cargo-nextest");
    cmd!(sh, "{cargo} install --locked cargo-nextest")
        .run()
        .context("cargo install cargo-nextest failed")?;
    Ok(())
}
