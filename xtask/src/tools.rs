//! External tools the tests need, installed when missing.
//!
//! Tests that need a tool never skip when it is absent: they fail. This module makes sure the tools
//! are there first. As root it installs Debian packages with apt-get; otherwise it stops with the
//! exact command to run.

use crate::cargo;
use anyhow::{Context, Result, bail};
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
        binary: "kubectl",
        debian_package: "kubectl",
    },
    Tool {
        binary: "promtool",
        debian_package: "prometheus",
    },
    Tool {
        binary: "prometheus",
        debian_package: "prometheus",
    },
];

/// Ensures every tool in [`TOOLS`] and cargo-nextest are available.
pub fn ensure_all() -> Result<()> {
    let sh = Shell::new()?;
    let missing: Vec<&Tool> = TOOLS.iter().filter(|t| !on_path(t.binary)).collect();
    if !missing.is_empty() {
        let mut packages: Vec<&str> = missing.iter().map(|t| t.debian_package).collect();
        packages.dedup();
        apt_install(&sh, &packages)?;
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
    ensure_nextest(&sh)
}

fn on_path(binary: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn version_line(binary: &str) -> String {
    let args: &[&str] = if binary == "kubectl" {
        &["version", "--client"]
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
