//! Builds the control-plane binaries from released sources through the Go module proxy.
//!
//! Job: for each entry of [`PINS`] (and of other tables of pins built the same way, such as
//! KubeVirt's in `xtask/src/kubevirt/`), generate a small Go module in
//! `target/cluster/src/<name>/` that requires the pinned module with the replace directives its
//! release needs ([`Replaces`], read from the pinned release's own go.mod), resolve it with `go
//! mod tidy`, and build the binaries into `target/cluster/bin/` with one `go build`.
//!
//! Invariants:
//! - the generated modules live under `target/` and are never committed;
//! - every version comes from a table of pins ([`PINS`] for the control plane); the cache stamp
//!   of a build is its pin line, so a second `cluster up` builds nothing and a changed pin
//!   rebuilds that entry only;
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
    /// The replace directives of the generated module.
    pub replaces: Replaces,
    /// Main packages and the file name of each binary.
    pub binaries: &'static [(&'static str, &'static str)],
    /// Extra `-X` link flags (the version the binaries report).
    pub version_ldflags: &'static [&'static str],
    /// Part of the control plane (built by `cluster up`); otherwise a tool built on first use
    /// only (Helm), so that a `cluster up` never waits for it.
    pub control_plane: bool,
    /// Files of the pinned module's source (paths inside it) copied to `bin/<name>-source/`
    /// with the binaries: manifests the binaries do not carry (KubeVirt's CRDs and RBAC).
    pub source_files: &'static [&'static str],
}

/// Which replace directives a generated module gets.
pub enum Replaces {
    /// None: the pinned module resolves as it is.
    None,
    /// Kubernetes: each staging module of the release (its go.mod's `=> ./staging/...` lines)
    /// at the released `v0.<minor>.<patch>` of the same name; Kubernetes' go.mod requires them
    /// at `v0.0.0` with local replaces.
    KubernetesStaging,
    /// KubeVirt: the release's own replace block, line for line, except that each `=>
    /// ./staging/src/<module>` becomes the release's tag of that module (KubeVirt publishes its
    /// staging modules `kubevirt.io/api` and `kubevirt.io/client-go` at its own tags), plus
    /// [`StandIn`]s for modules the Go proxy does not serve.
    ReleaseBlock {
        /// Local modules that replace unavailable ones.
        stand_ins: &'static [StandIn],
    },
}

/// A local module written next to the generated go.mod and replacing `module`, for a
/// requirement the Go proxy refuses to serve. It holds only what the built packages import;
/// each one says why it exists and what of the original it keeps.
pub struct StandIn {
    /// The replaced module path.
    pub module: &'static str,
    /// Its files (path inside the module, content), `go.mod` included.
    pub files: &'static [(&'static str, &'static str)],
}

impl StandIn {
    /// The directory of the stand-in, relative to the generated module.
    fn dir(&self) -> String {
        format!("./stand-in/{}", self.module)
    }
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
        replaces: Replaces::KubernetesStaging,
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
        source_files: &[],
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
        replaces: Replaces::None,
        binaries: &[("go.etcd.io/etcd/server/v3", "etcd")],
        version_ldflags: &[],
        control_plane: true,
        source_files: &[],
    },
    GoBuild {
        name: "kwok",
        module: "sigs.k8s.io/kwok",
        version: "v0.7.0",
        siblings: &[],
        replaces: Replaces::None,
        binaries: &[("sigs.k8s.io/kwok/cmd/kwok", "kwok")],
        // Its version variable already says 0.7.0.
        version_ldflags: &[],
        control_plane: true,
        source_files: &[],
    },
    // Helm 4 for the chart in deploy/helm: `helm lint` and `helm template` in `lint-deploy`,
    // `helm install` and `helm upgrade` in the e2e suite. Not part of the control plane.
    GoBuild {
        name: "helm",
        module: "helm.sh/helm/v4",
        version: "v4.3.2",
        siblings: &[],
        replaces: Replaces::None,
        binaries: &[("helm.sh/helm/v4/cmd/helm", "helm")],
        // What Helm's Makefile stamps for a tagged build; without it `helm version` says v4.3.
        version_ldflags: &["helm.sh/helm/v4/internal/version.version=v4.3.2"],
        control_plane: false,
        source_files: &[],
    },
];

/// Go build flags: no local paths in the binaries, no symbol tables (smaller, faster to link).
const GO_BUILD_FLAGS: &[&str] = &["-trimpath", "-buildvcs=false"];
const GO_LDFLAGS: &str = "-s -w";

impl GoBuild {
    /// The cache key: everything that decides what this entry builds. The control plane's
    /// entries keep the key they had before [`Replaces::ReleaseBlock`] and
    /// [`GoBuild::source_files`] existed, so that existing builds stay cached.
    fn stamp(&self) -> String {
        let staging = matches!(self.replaces, Replaces::KubernetesStaging);
        let mut extra = String::new();
        if let Replaces::ReleaseBlock { stand_ins } = &self.replaces {
            // The stand-ins' content, hashed: an edited stand-in rebuilds.
            let files: Vec<(&str, &str, &str)> = stand_ins
                .iter()
                .flat_map(|s| s.files.iter().map(|(path, text)| (s.module, *path, *text)))
                .collect();
            extra.push_str(&format!(
                " release-block stand-ins={:016x}",
                fnv1a(&format!("{files:?}"))
            ));
        }
        if !self.source_files.is_empty() {
            extra.push_str(&format!(" sources={:?}", self.source_files));
        }
        format!(
            "{}@{} siblings={:?} staging={staging} binaries={:?} ldflags={:?}{extra} flags={GO_BUILD_FLAGS:?} {GO_LDFLAGS}\n",
            self.module, self.version, self.siblings, self.binaries, self.version_ldflags,
        )
    }

    /// Where [`GoBuild::source_files`] are copied.
    pub fn source_dir(&self, bin: &Path) -> PathBuf {
        bin.join(format!("{}-source", self.name))
    }

    fn stamp_file(&self, bin: &Path) -> PathBuf {
        bin.join(format!(".built-{}", self.name))
    }

    /// Whether every binary (and source file) exists and was built from exactly this pin.
    fn is_cached(&self, bin: &Path) -> bool {
        let stamped = std::fs::read_to_string(self.stamp_file(bin)).unwrap_or_default();
        stamped == self.stamp()
            && self
                .binaries
                .iter()
                .all(|(_, file)| bin.join(file).is_file())
            && self
                .source_files
                .iter()
                .all(|path| self.source_dir(bin).join(file_name(path)).is_file())
    }
}

/// FNV-1a 64 of a text: a stable digest for cache stamps.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The last element of a slash-separated path.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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
    ensure_built(PINS.iter().filter(|b| which.selects(b)), src, bin)
}

/// Builds every entry of `builds` that is not cached in `bin` (generated modules under `src`).
pub fn ensure_built<'a>(
    builds: impl IntoIterator<Item = &'a GoBuild>,
    src: &Path,
    bin: &Path,
) -> Result<()> {
    let stale: Vec<&GoBuild> = builds.into_iter().filter(|b| !b.is_cached(bin)).collect();
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
        let upstream = generate_module(&go, build, &dir)?;
        go_build(&go, build, &dir, bin)?;
        copy_source_files(build, &upstream, bin)?;
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

/// Writes `dir/go.mod` (and the stand-ins, if any), resolves it with `go mod tidy`, and returns
/// where the pinned module was downloaded.
fn generate_module(go_bin: &Path, build: &GoBuild, dir: &Path) -> Result<Upstream> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let upstream = download(go_bin, build, dir)?;
    let replaces: Vec<(String, String)> = match &build.replaces {
        Replaces::None => Vec::new(),
        Replaces::KubernetesStaging => {
            let staging = staging_modules(&upstream.go_mod);
            ensure!(
                !staging.is_empty(),
                "{}@{}'s go.mod has no `=> ./staging/` replaces: the pin is not a Kubernetes release",
                build.module,
                build.version
            );
            let release = staging_version(build.version)?;
            staging
                .into_iter()
                .map(|module| (module.clone(), format!("{module} {release}")))
                .collect()
        }
        Replaces::ReleaseBlock { stand_ins } => {
            for stand_in in *stand_ins {
                for (path, text) in stand_in.files {
                    let file = dir.join(stand_in.dir()).join(path);
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent)
                            .with_context(|| format!("cannot create {}", parent.display()))?;
                    }
                    std::fs::write(&file, text)
                        .with_context(|| format!("cannot write {}", file.display()))?;
                }
            }
            release_replaces(&upstream.go_mod, build.version, stand_ins).with_context(|| {
                format!(
                    "the replace block of {}@{}'s go.mod",
                    build.module, build.version
                )
            })?
        }
    };
    std::fs::write(dir.join("go.mod"), go_mod(build, &replaces))
        .with_context(|| format!("cannot write {}/go.mod", dir.display()))?;
    let mut tidy = go(go_bin, dir);
    tidy.args(["mod", "tidy"]);
    run(
        tidy,
        &format!("go mod tidy in {} ({})", dir.display(), build.module),
    )?;
    Ok(upstream)
}

/// The pinned module as `go mod download -json` left it in the module cache.
struct Upstream {
    /// The text of its go.mod.
    go_mod: String,
    /// Its extracted source.
    dir: PathBuf,
}

/// The pinned module's own go.mod and source directory, through `go mod download -json`.
fn download(go_bin: &Path, build: &GoBuild, dir: &Path) -> Result<Upstream> {
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
    let source = info
        .get("Dir")
        .and_then(|p| p.as_str())
        .context("go mod download -json gave no Dir")?;
    Ok(Upstream {
        go_mod: std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?,
        dir: PathBuf::from(source),
    })
}

/// Copies [`GoBuild::source_files`] from the downloaded module to [`GoBuild::source_dir`].
fn copy_source_files(build: &GoBuild, upstream: &Upstream, bin: &Path) -> Result<()> {
    if build.source_files.is_empty() {
        return Ok(());
    }
    let target = build.source_dir(bin);
    std::fs::create_dir_all(&target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    for path in build.source_files {
        let from = upstream.dir.join(path);
        let to = target.join(file_name(path));
        // The module cache is read-only: copy the content, not the permissions.
        let text = std::fs::read(&from).with_context(|| {
            format!(
                "{}@{} has no {path} ({})",
                build.module,
                build.version,
                from.display()
            )
        })?;
        std::fs::write(&to, text).with_context(|| format!("cannot write {}", to.display()))?;
    }
    Ok(())
}

/// The replace directives of a KubeVirt-style release: every `from => to` of its go.mod, with
/// `=> ./staging/src/<module>` turned into `<module> <version>` and the modules of `stand_ins`
/// replaced by their local directories. Any other local replace is an error: it would point
/// into a source tree the consumer does not have.
pub fn release_replaces(
    go_mod: &str,
    version: &str,
    stand_ins: &[StandIn],
) -> Result<Vec<(String, String)>> {
    let mut replaces = Vec::new();
    for (from, to) in replace_lines(go_mod) {
        let module = from
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        if stand_ins.iter().any(|s| s.module == module) {
            continue;
        }
        let to = match to.strip_prefix("./staging/src/") {
            Some(staged) if staged == module => format!("{module} {version}"),
            Some(_) => bail!("{from} => {to}: the staging directory is not the module's path"),
            None if to.starts_with("./") || to.starts_with("../") => {
                bail!("{from} => {to}: a local replace that is not a staging module")
            }
            None => to,
        };
        replaces.push((from, to));
    }
    ensure!(
        !replaces.is_empty(),
        "no replace directives: the pin is not the kind of release this expects"
    );
    for stand_in in stand_ins {
        replaces.push((stand_in.module.to_owned(), stand_in.dir()));
    }
    Ok(replaces)
}

/// Every `from => to` of a go.mod's `replace` directives (blocks and single lines), as written.
fn replace_lines(go_mod: &str) -> Vec<(String, String)> {
    let mut in_block = false;
    let mut lines = Vec::new();
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or_default().trim();
        let directive = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "replace (" {
            in_block = true;
            continue;
        } else if let Some(single) = line.strip_prefix("replace ") {
            single.trim()
        } else {
            continue;
        };
        if let Some((from, to)) = directive.split_once("=>") {
            lines.push((from.trim().to_owned(), to.trim().to_owned()));
        }
    }
    lines
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
/// packages (so `go mod tidy` resolves everything they import) and the replaces (`from`, `to`
/// as written after `=>`).
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
        for (from, to) in replaces {
            text.push_str(&format!("\t{from} => {to}\n"));
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
    fn release_replaces_keep_the_block_map_staging_to_the_tag_and_add_stand_ins() {
        let go_mod = "module kubevirt.io/kubevirt\n\nrequire (\n\tk8s.io/api v0.34.2\n)\n\n\
                      replace (\n\tgithub.com/openshift/api => github.com/openshift/api v0.0.0-2021 // pinned\n\
                      \tk8s.io/api => k8s.io/api v0.34.2\n\n\
                      \tkubevirt.io/api => ./staging/src/kubevirt.io/api\n\
                      \tkubevirt.io/virt-template-api => kubevirt.io/virt-template-api v0.2.0\n)\n\n\
                      tool (\n\tgithub.com/onsi/ginkgo/v2/ginkgo\n)\n\
                      replace kubevirt.io/client-go => ./staging/src/kubevirt.io/client-go\n";
        let stand_ins = [StandIn {
            module: "kubevirt.io/virt-template-api",
            files: &[],
        }];
        let replaces = release_replaces(go_mod, "v1.9.0", &stand_ins).unwrap();
        let pairs: Vec<(&str, &str)> = replaces
            .iter()
            .map(|(from, to)| (from.as_str(), to.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                (
                    "github.com/openshift/api",
                    "github.com/openshift/api v0.0.0-2021"
                ),
                ("k8s.io/api", "k8s.io/api v0.34.2"),
                ("kubevirt.io/api", "kubevirt.io/api v1.9.0"),
                ("kubevirt.io/client-go", "kubevirt.io/client-go v1.9.0"),
                (
                    "kubevirt.io/virt-template-api",
                    "./stand-in/kubevirt.io/virt-template-api"
                ),
            ]
        );
        // A local replace into the release's tree that is not a staging module cannot be
        // followed by a consumer: an error, not a silently broken build.
        let odd = "replace (\n\tgithub.com/x/y => ./third_party/y\n)\n";
        assert!(release_replaces(odd, "v1.9.0", &[]).is_err());
        assert!(release_replaces("module m\n", "v1.9.0", &[]).is_err());
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
            &[("k8s.io/api".to_owned(), "k8s.io/api v0.35.4".to_owned())],
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
