//! `deploy/examples` as a user applies it: `kubectl apply -k deploy/examples` on `sim serve`
//! with the controller running creates the examples' own namespaces and rolls both out; the
//! KubeVirt-like example keeps clear of a real KubeVirt install's names. Needs `kubectl`; fails,
//! never skips, without it.
use crate::support;
use support::{KillOnDrop, free_port};

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect(
            "kubectl is not installed: install it (`cargo xtask tools` says how) to run this test",
        )
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let output = kubectl(kubeconfig, args);
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_examples_create_their_namespaces_and_roll_out() {
    let sim = support::serve_sim("examples", &["--nodes", "3", "--speed", "10"]);
    let kubeconfig = &sim.kubeconfig;
    let crd = sim.dir.join("crd.yaml");
    let output = Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
        .arg("crd")
        .output()
        .unwrap();
    std::fs::write(&crd, &output.stdout).unwrap();
    ok(kubeconfig, &["apply", "-f", crd.to_str().unwrap()]);
    let _controller = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_daemonset-canary"))
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
            .stderr(std::fs::File::create(sim.dir.join("controller.log")).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let applied = ok(kubeconfig, &["apply", "-k", "deploy/examples"]);
    for created in [
        "namespace/node-agent-example created",
        "namespace/virt-handler-example created",
    ] {
        assert!(applied.contains(created), "{applied}");
    }
    for (namespace, name) in [
        ("node-agent-example", "node-exporter"),
        ("virt-handler-example", "virt-handler-like"),
    ] {
        ok(
            kubeconfig,
            &[
                "-n",
                namespace,
                "wait",
                &format!("cds/{name}"),
                "--for=jsonpath={.status.phase}=successful",
                "--timeout=90s",
            ],
        );
    }
    let all = ok(
        kubeconfig,
        &[
            "get",
            "cds,ds",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        ],
    );
    assert_eq!(
        all.split_whitespace().collect::<Vec<_>>(),
        [
            "node-agent-example/node-exporter",
            "virt-handler-example/virt-handler-like",
            "node-agent-example/node-exporter",
            "virt-handler-example/virt-handler-like",
        ],
        "no object in KubeVirt's namespace or under virt-handler's name"
    );
    let version = ok(
        kubeconfig,
        &[
            "-n",
            "node-agent-example",
            "get",
            "cds",
            "node-exporter",
            "-o",
            "jsonpath={.status.targetVersion}",
        ],
    );
    assert_eq!(version, "v1.9.1", "the tag of the node-exporter image");
}
