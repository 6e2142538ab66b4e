//! Bringing the cluster up: limits checked before anything is touched, the
//! topology built in order, images checked and loaded.

use super::*;

#[test]
fn the_inotify_check_names_the_limits_and_the_fix() {
    assert!(inotify_problem(512, 524_288).is_none());
    let p = inotify_problem(128, 8192).unwrap();
    assert!(
        p.contains("max_user_instances=128") && p.contains("max_user_watches=8192"),
        "{p}"
    );
    assert!(
        p.contains("sudo sysctl -w fs.inotify.max_user_instances=512"),
        "{p}"
    );
    assert!(inotify_problem(512, 8192).is_some());
}

#[tokio::test]
async fn up_refuses_low_inotify_limits_before_touching_anything() {
    let k = kube();
    let args = kind_args();
    let e = install::up(&k, &args, Some((128, 8192))).await.unwrap_err();
    assert!(e.to_string().contains("fix: sudo sysctl"), "{e}");
    assert!(
        k.runner.model().commands.is_empty(),
        "no cluster was created"
    );
}

#[tokio::test]
async fn up_builds_the_topology_in_order() {
    let k = kube();
    install::up(&k, &kind_args(), Some((512, 524_288)))
        .await
        .unwrap();
    let cmds = k.runner.model().commands.clone();
    let at = |s: &str| {
        cmds.iter()
            .position(|c| c.contains(s))
            .unwrap_or_else(|| panic!("{s:?} not run: {cmds:#?}"))
    };
    assert!(
        at("kind create cluster --name vfps-ha") < at("kind load image-archive --name vfps-ha")
    );
    assert!(at("docker image save --platform linux/amd64") < at("kind load image-archive"));
    assert!(cmds[at("docker image save")].ends_with("ghcr.io/miracum/vfps:ci"));
    assert!(cmds.iter().any(
        |c| c.starts_with("docker image save --platform linux/amd64")
            && c.ends_with("ghcr.io/miracum/vfps/stress-test:ci")
    ));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("dashboard.create=false"));
    // Pinned: the operators the manifests are validated against, the node image by digest.
    assert!(cmds[at("cnpg/cloudnative-pg")].contains("--version 0.26.1"));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("--version 2.7.2"));
    assert!(cmds[at("kind create cluster")].contains("--image kindest/node:v1.32.2@sha256:"));
    assert!(cmds[at("chaos-mesh/chaos-mesh")].contains("/run/containerd/containerd.sock"));
    assert!(at("cnpg/cloudnative-pg") < at("get cluster vfps-db"));
    assert!(
        at("get cluster vfps-db") < at("helm upgrade --install vfps"),
        "the database is healthy before vfps"
    );
    assert!(at("helm upgrade --install vfps") < at("rollout status deployment/vfps"));
    // The run's tokens are made by vfps itself once it runs, one per kind.
    let made: Vec<&String> = cmds
        .iter()
        .filter(|c| c.contains("vfps tokens create"))
        .collect();
    assert_eq!(made.len(), 3, "{cmds:#?}");
    assert!(at("rollout status deployment/vfps") < at("vfps tokens create"));
    assert!(made.iter().any(|c| c.contains("--expires-in 1s")));
    assert!(
        k.runner.model().tokens_secret,
        "the tokens Secret is applied"
    );
}

#[test]
fn a_cluster_is_healthy_only_with_every_instance_of_its_spec_and_the_healthy_phase() {
    let cluster = |instances: u64, ready: u64, phase: &str, target: &str| {
        CnpgStatus::of(&json!({"spec": {"instances": 3}, "status": {
            "instances": instances, "readyInstances": ready, "phase": phase,
            "currentPrimary": "vfps-db-1", "targetPrimary": target}}))
    };
    assert!(cluster(3, 3, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    // CloudNativePG adds replicas one at a time: one instance, ready, is a
    // cluster still bootstrapping.
    assert!(!cluster(1, 1, "Creating a new replica", "vfps-db-1").healthy());
    assert!(!cluster(1, 1, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    assert!(!cluster(3, 2, cluster::PHASE_HEALTHY, "vfps-db-1").healthy());
    assert!(!cluster(3, 3, "Failing over", "vfps-db-1").healthy());
    assert!(!cluster(3, 3, cluster::PHASE_HEALTHY, "vfps-db-2").healthy());
    assert!(!CnpgStatus::of(&json!({})).healthy());
}

#[tokio::test]
async fn up_waits_until_the_database_has_every_instance_of_its_spec() {
    let k = kube();
    k.runner.model().bootstrapping = 4;
    install::up(&k, &kind_args(), None).await.unwrap();
    let m = k.runner.model();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert!(m
        .commands
        .iter()
        .any(|c| c.starts_with("helm upgrade --install vfps")));
}

#[tokio::test]
async fn up_refuses_an_image_that_is_not_this_vfps_before_loading_it() {
    for answer in [
        Ok("Unhandled exception. System.ArgumentException".to_owned()),
        Err("exec: /usr/local/bin/vfps: not found"),
    ] {
        let fake = Overriding(FakeKubectl::new(), move |program: &str, _: &[&str]| {
            (program == "docker").then(|| answer.clone().map_err(|e| anyhow::anyhow!(e)))
        });
        let mut k = Kube::new(fake, &assets());
        k.poll = Duration::from_millis(5);
        let e = install::up(&k, &kind_args(), None).await.unwrap_err();
        assert!(
            e.to_string().contains("is not an image of this vfps"),
            "{e:#}"
        );
        let cmds = k.runner.0.model().commands.clone();
        assert!(!cmds.iter().any(|c| c.contains("kind load")), "{cmds:#?}");
    }
}

/// A released vfps is a multi-arch image, pulled for this machine's platform
/// into a Docker with the containerd image store: `kind load docker-image`
/// would fail; each image is saved for its one platform and loaded as an
/// archive, which kind imports whole.
#[tokio::test]
async fn a_released_multi_arch_image_is_loaded_as_one_platforms_archive() {
    let k = kube();
    let args = KindArgs {
        image_tag: "1.2.3".into(),
        stress_test_tag: Some("ci".into()),
        ..kind_args()
    };
    install::up(&k, &args, None).await.unwrap();
    let m = k.runner.model();
    assert_eq!(
        m.archives.values().filter(|one| **one).count(),
        2,
        "{:#?}",
        m.commands
    );
    assert!(!m
        .commands
        .iter()
        .any(|c| c.contains("kind load docker-image")));
}

#[test]
fn versions_must_pin_the_node_image_by_digest() {
    let pinned = std::fs::read_to_string(assets().join("versions.env")).unwrap();
    assert_eq!(
        install::Versions::parse(&pinned).unwrap().cnpg_chart,
        "0.26.1"
    );
    let floating = pinned.replace("@sha256:", ":latest-");
    let e = install::Versions::parse(&floating).unwrap_err();
    assert!(e.to_string().contains("not pinned by digest"), "{e}");
    let e = install::Versions::parse("CNPG_CHART_VERSION=1").unwrap_err();
    assert!(e.to_string().contains("is not set"), "{e}");
}
