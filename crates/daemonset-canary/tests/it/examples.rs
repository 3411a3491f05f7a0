//! `deploy/examples` as a user applies it: `kubectl apply -k deploy/examples` on `sim serve`
//! with the controller running creates the examples' own namespaces and rolls both out; the
//! KubeVirt-like example keeps clear of a real KubeVirt install's names. Needs `kubectl`; fails,
//! never skips, without it.
use crate::support;

use std::process::Stdio;

#[test]
fn the_examples_create_their_namespaces_and_roll_out() {
    let sim = support::serve_sim("examples", &["--nodes", "3", "--speed", "10"]);
    sim.apply_crd();
    let _controller = support::spawn_run(
        &sim.kubeconfig,
        Stdio::from(std::fs::File::create(sim.dir.join("controller.log")).unwrap()),
    );
    let applied = sim.kubectl_ok(&["apply", "-k", "deploy/examples"]);
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
        sim.kubectl_ok(&[
            "-n",
            namespace,
            "wait",
            &format!("cds/{name}"),
            "--for=jsonpath={.status.phase}=successful",
            "--timeout=90s",
        ]);
    }
    let all = sim.kubectl_ok(&[
        "get",
        "cds,ds",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
    ]);
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
    let version = sim.kubectl_ok(&[
        "-n",
        "node-agent-example",
        "get",
        "cds",
        "node-exporter",
        "-o",
        "jsonpath={.status.targetVersion}",
    ]);
    assert_eq!(version, "v1.9.1", "the tag of the node-exporter image");
}
