//! daemonset-canary: the controller binary (work in progress).

fn main() {}
