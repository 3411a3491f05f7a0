//! Builds the control-plane binaries from released sources through the Go module proxy.
//!
//! Job: for each entry of [`PINS`], generate a small Go module in `target/cluster/src/<name>/`
//! that requires the pinned module (and, for Kubernetes, replaces every staging module with its
//! release of the same minor and patch, read from the pinned release's own go.mod), resolve it
//! with `go mod tidy`, and build the binaries into `target/cluster/bin/` with one `go build`.
//!
//! Invariants:
//! - the generated modules live under `target/` and are never committed;
//! - every version comes from [`PINS`], the one table of pins; the cache stamp of a build is its
//!   pin line, so a second `cluster up` builds nothing and a changed pin rebuilds that entry only;
//! - the Go proxy and Go's caches are the environment's (`GOPROXY`, `GOCACHE`, `GOMODCACHE`);
//!   nothing here names a registry host. `GOTOOLCHAIN=local`: a pin that needs a newer Go fails
//!   with Go's own message instead of fetching a toolchain.

use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// One Go module to build binaries from.
pub struct GoBuild {
    /// Directory of the generated module under `target/cluster/src/`.
    pub name: &'static str,
    /// The module that holds the main packages.
    pub module: &'static str,
    /// Its pinned version (a release tag).
    pub version: &'static str,
    /// Sibling modules required at the same version (etcd's own go.mod points them at local
    /// paths, which a consumer cannot use).
    pub siblings: &'static [&'static str],
    /// Replace each staging module of `module` (its go.mod's `=> ./staging/...` lines) with the
    /// released `v0.<minor>.<patch>` of the same name: Kubernetes' go.mod requires them at
    /// `v0.0.0` with local replaces.
    pub staging_replaces: bool,
    /// Main packages and the file name of each binary.
    pub binaries: &'static [(&'static str, &'static str)],
    /// Extra `-X` link flags (the version the binaries report).
    pub version_ldflags: &'static [&'static str],
    /// Part of the control plane (built by `cluster up`); otherwise a tool built on first use
    /// only (Helm), so that a `cluster up` never waits for it.
    pub control_plane: bool,
}

/// The pinned Go builds. The control plane: Kubernetes 1.35.4 (kube 5's k8s-openapi supports it; the project's
/// oldest supported release stays 1.33), etcd 3.6 (what Kubernetes 1.35 is tested with), KWOK
/// 0.7.0 (built with Kubernetes 1.33 client libraries, compatible with a 1.35 server). The tool
/// built beside it on first use: Helm 4.3.2.
pub const PINS: &[GoBuild] = &[
    GoBuild {
        name: "kubernetes",
        module: "k8s.io/kubernetes",
        version: "v1.35.4",
        siblings: &[],
        staging_replaces: true,
        binaries: &[
            ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
            (
                "k8s.io/kubernetes/cmd/kube-controller-manager",
                "kube-controller-manager",
            ),
            ("k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"),
            ("k8s.io/kubernetes/cmd/kubectl", "kubectl"),
        ],
        // What Kubernetes' own build (hack/lib/version.sh) stamps; without it `/version` and
        // `kubectl version` say v0.0.0-master.
        version_ldflags: &[
            "k8s.io/component-base/version.gitVersion=v1.35.4",
            "k8s.io/component-base/version.gitMajor=1",
            "k8s.io/component-base/version.gitMinor=35",
            "k8s.io/component-base/version.gitTreeState=clean",
            "k8s.io/client-go/pkg/version.gitVersion=v1.35.4",
            "k8s.io/client-go/pkg/version.gitMajor=1",
            "k8s.io/client-go/pkg/version.gitMinor=35",
        ],
        control_plane: true,
    },
    GoBuild {
        name: "etcd",
        module: "go.etcd.io/etcd/server/v3",
        version: "v3.6.16",
        siblings: &[
            "go.etcd.io/etcd/api/v3",
            "go.etcd.io/etcd/client/pkg/v3",
            "go.etcd.io/etcd/client/v3",
            "go.etcd.io/etcd/pkg/v3",
        ],
        staging_replaces: false,
        binaries: &[("go.etcd.io/etcd/server/v3", "etcd")],
        version_ldflags: &[],
        control_plane: true,
    },
    GoBuild {
        name: "kwok",
        module: "sigs.k8s.io/kwok",
        version: "v0.7.0",
        siblings: &[],
        staging_replaces: false,
        binaries: &[("sigs.k8s.io/kwok/cmd/kwok", "kwok")],
        // Its version variable already says 0.7.0.
        version_ldflags: &[],
        control_plane: true,
    },
    // Helm 4 for the chart in deploy/helm: `helm lint` and `helm template` in `lint-deploy`,
    // `helm install` and `helm upgrade` in the e2e suite. Not part of the control plane.
    GoBuild {
        name: "helm",
        module: "helm.sh/helm/v4",
        version: "v4.3.2",
        siblings: &[],
        staging_replaces: false,
        binaries: &[("helm.sh/helm/v4/cmd/helm", "helm")],
        // What Helm's Makefile stamps for a tagged build; without it `helm version` says v4.3.
        version_ldflags: &["helm.sh/helm/v4/internal/version.version=v4.3.2"],
        control_plane: false,
    },
];

/// Go build flags: no local paths in the binaries, no symbol tables (smaller, faster to link).
const GO_BUILD_FLAGS: &[&str] = &["-trimpath", "-buildvcs=false"];
const GO_LDFLAGS: &str = "-s -w";

impl GoBuild {
    /// The cache key: everything that decides what this entry builds.
    fn stamp(&self) -> String {
        format!(
            "{}@{} siblings={:?} staging={} binaries={:?} ldflags={:?} flags={GO_BUILD_FLAGS:?} {GO_LDFLAGS}\n",
            self.module,
            self.version,
            self.siblings,
            self.staging_replaces,
            self.binaries,
            self.version_ldflags,
        )
    }

    fn stamp_file(&self, bin: &Path) -> PathBuf {
        bin.join(format!(".built-{}", self.name))
    }

    /// Whether every binary exists and was built from exactly this pin.
    fn is_cached(&self, bin: &Path) -> bool {
        let stamped = std::fs::read_to_string(self.stamp_file(bin)).unwrap_or_default();
        stamped == self.stamp()
            && self
                .binaries
                .iter()
                .all(|(_, file)| bin.join(file).is_file())
    }
}

/// The `go` command: on PATH, else where the Go distribution installs it.
pub fn go_command() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("go"))
        .find(|candidate| candidate.is_file());
    let fallback = PathBuf::from("/usr/local/go/bin/go");
    match on_path {
        Some(go) => Ok(go),
        None if fallback.is_file() => Ok(fallback),
        None => bail!(
            "no Go toolchain: `go` is not on PATH nor at /usr/local/go/bin/go; the control plane \
             of `cargo xtask cluster` is built from Go sources (install Go 1.26, e.g. Debian's \
             golang-go is too old)"
        ),
    }
}

/// Which entries of [`PINS`] to build.
#[derive(Clone, Copy)]
pub enum Which {
    /// The control plane and kubectl (`cluster up`).
    ControlPlane,
    /// One entry, by its [`GoBuild::name`].
    Named(&'static str),
    /// Every entry (`cluster build`).
    All,
}

impl Which {
    fn selects(self, build: &GoBuild) -> bool {
        match self {
            Self::ControlPlane => build.control_plane,
            Self::Named(name) => build.name == name,
            Self::All => true,
        }
    }
}

/// Builds every selected entry of [`PINS`] that is not cached in `bin`.
pub fn ensure_binaries(src: &Path, bin: &Path, which: Which) -> Result<()> {
    ensure!(
        PINS.iter().any(|b| which.selects(b)),
        "no pinned Go build is selected"
    );
    let stale: Vec<&GoBuild> = PINS
        .iter()
        .filter(|b| which.selects(b) && !b.is_cached(bin))
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let go = go_command()?;
    std::fs::create_dir_all(bin).with_context(|| format!("cannot create {}", bin.display()))?;
    for build in stale {
        let started = Instant::now();
        eprintln!(
            "==> cluster: building {} from {}@{} (cold: minutes; cached afterwards)",
            build
                .binaries
                .iter()
                .map(|(_, f)| *f)
                .collect::<Vec<_>>()
                .join(", "),
            build.module,
            build.version
        );
        let dir = src.join(build.name);
        generate_module(&go, build, &dir)?;
        go_build(&go, build, &dir, bin)?;
        std::fs::write(build.stamp_file(bin), build.stamp())
            .with_context(|| format!("cannot write the stamp of {}", build.name))?;
        eprintln!(
            "==> cluster: built {} in {:.0} s",
            build.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// A `go` command run in `dir` with the settings every call shares.
fn go(go: &Path, dir: &Path) -> Command {
    let mut command = Command::new(go);
    command.current_dir(dir).env("GOTOOLCHAIN", "local");
    command
}

fn run(mut command: Command, what: &str) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("{what} printed non-UTF-8"))
}

/// Writes `dir/go.mod` (and nothing else) and resolves it with `go mod tidy`.
fn generate_module(go_bin: &Path, build: &GoBuild, dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let replaces = if build.staging_replaces {
        let upstream = upstream_go_mod(go_bin, build, dir)?;
        let staging = staging_modules(&upstream);
        ensure!(
            !staging.is_empty(),
            "{}@{}'s go.mod has no `=> ./staging/` replaces: the pin is not a Kubernetes release",
            build.module,
            build.version
        );
        let release = staging_version(build.version)?;
        staging
            .into_iter()
            .map(|module| (module, release.clone()))
            .collect()
    } else {
        Vec::new()
    };
    std::fs::write(dir.join("go.mod"), go_mod(build, &replaces))
        .with_context(|| format!("cannot write {}/go.mod", dir.display()))?;
    let mut tidy = go(go_bin, dir);
    tidy.args(["mod", "tidy"]);
    run(
        tidy,
        &format!("go mod tidy in {} ({})", dir.display(), build.module),
    )?;
    Ok(())
}

/// The text of the pinned module's own go.mod, through `go mod download -json`.
fn upstream_go_mod(go_bin: &Path, build: &GoBuild, dir: &Path) -> Result<String> {
    let mut download = go(go_bin, dir);
    download.args([
        "mod",
        "download",
        "-json",
        &format!("{}@{}", build.module, build.version),
    ]);
    let json = run(
        download,
        &format!("go mod download {}@{}", build.module, build.version),
    )?;
    let info: serde_json::Value =
        serde_json::from_str(&json).context("go mod download -json printed no JSON object")?;
    if let Some(error) = info.get("Error").and_then(|e| e.as_str()) {
        bail!(
            "go mod download {}@{}: {error}",
            build.module,
            build.version
        );
    }
    let path = info
        .get("GoMod")
        .and_then(|p| p.as_str())
        .context("go mod download -json gave no GoMod path")?;
    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))
}

/// Modules replaced by a local `./staging/...` directory in a go.mod (one per line, in the
/// `replace ( ... )` block or as single `replace` lines).
pub fn staging_modules(go_mod: &str) -> Vec<String> {
    go_mod
        .lines()
        .map(|line| line.trim().trim_start_matches("replace").trim())
        .filter_map(|line| line.split_once("=>"))
        .filter(|(_, to)| to.trim().starts_with("./staging/"))
        .filter_map(|(from, _)| from.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// `v1.35.4` → `v0.35.4`: the tag of the staging modules published with a Kubernetes release.
pub fn staging_version(kubernetes: &str) -> Result<String> {
    let rest = kubernetes
        .strip_prefix("v1.")
        .with_context(|| format!("{kubernetes} is not a v1.x.y Kubernetes tag"))?;
    Ok(format!("v0.{rest}"))
}

/// The generated go.mod: the pinned requirement, its siblings, `tool` lines for the main
/// packages (so `go mod tidy` resolves everything they import) and the replaces.
pub fn go_mod(build: &GoBuild, replaces: &[(String, String)]) -> String {
    let mut text = format!(
        "// Generated by `cargo xtask cluster` (xtask/src/cluster/build.rs); do not edit.\n\
         module daemonset-canary.local/cluster/{}\n\ngo 1.24.0\n\nrequire (\n\t{} {}\n",
        build.name, build.module, build.version
    );
    for sibling in build.siblings {
        text.push_str(&format!("\t{sibling} {}\n", build.version));
    }
    text.push_str(")\n\ntool (\n");
    for (package, _) in build.binaries {
        text.push_str(&format!("\t{package}\n"));
    }
    text.push_str(")\n");
    if !replaces.is_empty() {
        text.push_str("\nreplace (\n");
        for (module, version) in replaces {
            text.push_str(&format!("\t{module} => {module} {version}\n"));
        }
        text.push_str(")\n");
    }
    text
}

/// One `go build` for all of an entry's binaries, so the packages they share compile once.
fn go_build(go_bin: &Path, build: &GoBuild, dir: &Path, bin: &Path) -> Result<()> {
    let mut ldflags = GO_LDFLAGS.to_owned();
    for flag in build.version_ldflags {
        ldflags.push_str(" -X ");
        ldflags.push_str(flag);
    }
    let mut command = go(go_bin, dir);
    command.arg("build").args(GO_BUILD_FLAGS);
    command.arg(format!("-ldflags={ldflags}"));
    // `-o dir/` names each binary after its package's last path element; a single package is
    // named explicitly (etcd's main package is `.../server/v3`).
    let out = if let [(_, file)] = build.binaries {
        bin.join(file)
    } else {
        for (package, file) in build.binaries {
            ensure!(
                package.rsplit('/').next() == Some(*file),
                "{package} would not build to {file}"
            );
        }
        let mut dir_path = bin.as_os_str().to_owned();
        dir_path.push("/");
        PathBuf::from(dir_path)
    };
    command.arg("-o").arg(&out);
    command.args(build.binaries.iter().map(|(package, _)| *package));
    run(command, &format!("go build of {}", build.name))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_modules_are_read_from_the_replace_block() {
        let go_mod = "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\
                      \tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n\
                      replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl\n";
        assert_eq!(
            staging_modules(go_mod),
            ["k8s.io/api", "k8s.io/client-go", "k8s.io/kubectl"]
        );
    }

    #[test]
    fn staging_version_follows_the_release() {
        assert_eq!(staging_version("v1.35.4").ok().as_deref(), Some("v0.35.4"));
        assert!(staging_version("v3.6.16").is_err());
    }

    #[test]
    fn generated_go_mod_requires_replaces_and_lists_tools() {
        let kubernetes = &PINS[0];
        let text = go_mod(
            kubernetes,
            &[("k8s.io/api".to_owned(), "v0.35.4".to_owned())],
        );
        assert!(text.contains("\tk8s.io/kubernetes v1.35.4\n"), "{text}");
        assert!(text.contains("\tk8s.io/kubernetes/cmd/kubectl\n"), "{text}");
        assert!(
            text.contains("\tk8s.io/api => k8s.io/api v0.35.4\n"),
            "{text}"
        );
        let etcd = &PINS[1];
        let text = go_mod(etcd, &[]);
        assert!(
            text.contains("\tgo.etcd.io/etcd/client/v3 v3.6.16\n"),
            "{text}"
        );
        assert!(!text.contains("replace"), "{text}");
    }

    #[test]
    fn multi_binary_builds_are_named_after_their_packages() {
        for build in PINS.iter().filter(|b| b.binaries.len() > 1) {
            for (package, file) in build.binaries {
                assert_eq!(package.rsplit('/').next(), Some(*file));
            }
        }
    }
}
