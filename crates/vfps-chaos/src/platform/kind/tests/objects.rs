//! The object store of CSV jobs on kind, against the simulated cluster: `up`
//! installs Garage between the namespace and vfps, connects and lays out its
//! nodes by zone, makes the bucket and vfps's key and hands the key over in
//! the Secret the chart reads; a reused cluster keeps all of it; a node kill
//! is proven and healed.

use std::time::Duration;

use super::{assets, garage::node_id, kind_args, kube, FakeKubectl, Overriding};
use crate::driver::Driver;
use crate::platform::kind::{
    install::{self, Versions},
    objects::{self, BUCKET, S3_SECRET},
    Kube, Runner,
};

/// The object store as `up` leaves it.
pub(super) async fn install<R: Runner>(k: &Kube<R>) {
    k.install_objects(&garage_image(), Duration::from_secs(5))
        .await
        .unwrap();
}

fn garage_image() -> String {
    Versions::parse(&std::fs::read_to_string(assets().join("versions.env")).unwrap())
        .unwrap()
        .garage_image
}

#[tokio::test]
async fn up_installs_the_object_store_after_the_namespace_and_before_vfps() {
    let k = kube();
    install::up(&k, &kind_args(), None).await.unwrap();
    let m = k.runner.model();
    let at = |s: &str| {
        m.commands
            .iter()
            .position(|c| c.contains(s))
            .unwrap_or_else(|| panic!("{s:?} not run: {:#?}", m.commands))
    };
    assert!(at("chaos-mesh/chaos-mesh") < at("get secret garage-rpc"));
    assert!(at("/garage layout apply --version 1") < at("/garage bucket create vfps-jobs"));
    assert!(
        at("/garage bucket allow --read --write --owner vfps-jobs --key GK")
            < at("helm upgrade --install vfps")
    );
    assert!(at("rollout status statefulset/garage") < at("helm upgrade --install vfps"));
    assert!(
        m.objects.violations.is_empty(),
        "{:?}",
        m.objects.violations
    );
    assert!(m.violations.is_empty(), "{:?}", m.violations);
}

#[tokio::test]
async fn up_lays_out_one_node_per_zone_and_hands_vfps_a_key_the_bucket_allows() {
    let k = kube();
    install::up(&k, &kind_args(), None).await.unwrap();
    let m = k.runner.model();
    let g = &m.objects;
    assert!(g.violations.is_empty(), "{:?}", g.violations);
    assert_eq!(g.layout_version, 1);
    let zones: Vec<&str> = (0..3).map(|i| g.roles[&node_id(i)].as_str()).collect();
    assert_eq!(
        zones,
        ["zone-a", "zone-b", "zone-c"],
        "each node its own node's zone"
    );
    assert!(g.buckets.contains(BUCKET));
    let (id, secret) = g.s3_secret.clone().expect("the Secret vfps reads");
    assert!(g.allowed.contains(&(BUCKET.to_owned(), id)));
    // The database archives to a bucket of its own, with a key of its own,
    // once that key exists (docs/backup.md).
    let (backup_id, backup_secret) = g.backup_secret.clone().expect("the backup Secret");
    assert!(g
        .allowed
        .contains(&(objects::BACKUP_BUCKET.to_owned(), backup_id)));
    assert!(
        m.backup_patch
            .as_deref()
            .is_some_and(|p| p.contains("barmanObjectStore") && p.contains("vfps-backup-s3")),
        "the Cluster patched with cnpg-backup.yaml: {:?}",
        m.backup_patch
    );
    let image = garage_image();
    assert!(
        g.statefulset
            .as_deref()
            .is_some_and(|s| s.contains(&format!("image: {image}\n"))),
        "the image pinned in versions.env"
    );
    // Secrets travel through kubectl's standard input, never its arguments.
    let rpc = g.rpc_secret.clone().unwrap();
    assert!(
        !m.commands
            .iter()
            .any(|c| c.contains(&secret) || c.contains(&rpc) || c.contains(&backup_secret)),
        "a secret on a command line"
    );
}

#[tokio::test]
async fn up_on_a_reused_cluster_keeps_the_stores_secret_layout_bucket_and_key() {
    let k = kube();
    install::up(&k, &kind_args(), None).await.unwrap();
    let before = {
        let m = k.runner.model();
        (m.objects.rpc_secret.clone(), m.objects.s3_secret.clone())
    };
    install::up(&k, &kind_args(), None).await.unwrap();
    let m = k.runner.model();
    assert_eq!(
        (m.objects.rpc_secret.clone(), m.objects.s3_secret.clone()),
        before
    );
    let count = |s: &str| m.commands.iter().filter(|c| c.contains(s)).count();
    assert_eq!(count("/garage layout apply"), 1);
    // One each for vfps's jobs and the database's backups.
    assert_eq!(count("/garage bucket create"), 2);
    assert_eq!(count("/garage key create"), 2);
    assert_eq!(
        count("patch cluster vfps-db"),
        2,
        "patched again: idempotent"
    );
    assert!(
        m.objects.violations.is_empty(),
        "{:?}",
        m.objects.violations
    );
}

#[tokio::test]
async fn the_scenarios_wait_for_a_healthy_object_store() {
    let k = kube();
    install(&k).await;
    // A node still starting: the first fault waits until it serves.
    k.runner.model().objects.pods[2].warming = 6;
    k.runner.model().commands.clear();
    let dir = vfps_testkit::scratch_dir("kind-objects-gate");
    let plan = crate::scenario::ScenarioPlan {
        scenarios: vec![super::planned(
            crate::scenario::Scenario::Baseline,
            "baseline",
            1,
        )],
        margin_seconds: 1,
        seed: None,
        drill: None,
    };
    let d = super::driver(k);
    d.scenarios(&plan, &super::knobs(), &super::load_config(&dir))
        .await
        .unwrap();
    let m = d.kube.runner.model();
    let at = |s: &str| {
        m.commands
            .iter()
            .position(|c| c.contains(s))
            .unwrap_or_else(|| panic!("{s:?} not run: {:#?}", m.commands))
    };
    assert!(
        at("json-api GetClusterHealth") < at("apply -f -"),
        "healthy before the Job"
    );
    assert!(m.objects.pods.iter().all(|p| p.warming == 0));
}

#[tokio::test]
async fn a_killed_object_store_node_is_proven_gone_and_back_as_the_same_node() {
    let k = kube();
    k.install_objects(&garage_image(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        k.objects_node_names().await.unwrap(),
        ["garage-0", "garage-1", "garage-2"]
    );
    assert!(k.objects_pod_answers("garage-1").await);
    k.kill_objects_pod("garage-1").await.unwrap();
    assert!(
        !k.objects_pod_answers("garage-1").await,
        "the replacement is not serving yet"
    );
    k.restore_objects_pod("garage-1").await.unwrap();
    assert!(k.objects_pod_answers("garage-1").await);
    let m = k.runner.model();
    assert!(!m.objects.kill_chaos, "the spent PodChaos is removed");
    assert_eq!(m.objects.layout_version, 1, "the same node: no new layout");
    assert!(
        m.objects.violations.is_empty(),
        "{:?}",
        m.objects.violations
    );
    assert!(m
        .commands
        .iter()
        .any(|c| c.contains("-c postgres -- bash -c") && c.contains("/3900'")));
}

/// The shared scenario on Kubernetes: the StatefulSet re-creates the pod at
/// once, so the kill is proven by the incarnation gone and the heal by the
/// node answering in a healthy store — not by silence at the window's end.
#[tokio::test]
async fn objects_node_kill_runs_on_kubernetes_proven_by_the_incarnation_and_the_heal() {
    let k = kube();
    install(&k).await;
    let before = k.runner.model().objects.pods.clone();
    let scenario = super::run_plan(
        &k,
        vec![super::planned(
            crate::scenario::Scenario::ObjectsNodeKill,
            "objects-node-kill",
            2,
        )],
    );
    // Time passes for the cluster while the node is held down: the
    // StatefulSet's replacement starts (the fake's pods warm up as they are
    // read), as it does within seconds on a real cluster.
    let cluster_moves_on = async {
        loop {
            let _ = k.objects_node_names().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (r, events) = tokio::select! {
        done = scenario => done,
        () = cluster_moves_on => unreachable!("the cluster's clock never stops"),
    };
    r.unwrap();
    let has = |s: &str| events.iter().any(|e| e.contains(s));
    for expected in [
        "objects-node-kill killed object store node garage-0: that incarnation is gone",
        "objects-node-kill healed: object store node garage-0 re-created and answering",
    ] {
        assert!(has(expected), "missing event {expected:?} in {events:#?}");
    }
    let m = k.runner.model();
    assert_ne!(
        m.objects.pods[0].uid, before[0].uid,
        "the drawn node's pod was re-created"
    );
    let uids = |pods: &[super::garage::GaragePod]| pods.iter().map(|p| p.uid).collect::<Vec<_>>();
    assert_eq!(
        uids(&m.objects.pods[1..]),
        uids(&before[1..]),
        "the others untouched"
    );
    assert!(!m.objects.kill_chaos, "the spent PodChaos is removed");
    assert!(
        m.objects.violations.is_empty(),
        "{:?}",
        m.objects.violations
    );
}

/// A PodChaos that kills nothing fails the shared scenario too.
#[tokio::test]
async fn objects_node_kill_fails_on_kubernetes_when_nothing_was_killed() {
    let mut k = kube();
    k.heal_timeout = Duration::from_millis(300);
    install(&k).await;
    k.runner.model().objects.inert = true;
    let (r, _) = super::run_plan(
        &k,
        vec![super::planned(
            crate::scenario::Scenario::ObjectsNodeKill,
            "objects-node-kill",
            1,
        )],
    )
    .await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("object store pod garage-0 killed"), "{e}");
}

/// Chaos Mesh takes the PodChaos and kills nothing: the kill never took
/// effect, the scenario fails, and the run's cleanup removes the object.
#[tokio::test]
async fn a_pod_chaos_that_kills_no_object_store_node_fails_and_is_cleaned_up() {
    let mut k = kube();
    k.heal_timeout = Duration::from_millis(300);
    k.install_objects(&garage_image(), Duration::from_secs(5))
        .await
        .unwrap();
    k.runner.model().objects.inert = true;
    let e = format!("{:#}", k.kill_objects_pod("garage-2").await.unwrap_err());
    assert!(e.contains("object store pod garage-2 killed"), "{e}");
    k.cleanup_chaos().await.unwrap();
    assert!(!k.runner.model().objects.kill_chaos);
}

#[tokio::test]
async fn an_object_store_spread_over_fewer_zones_is_refused() {
    // Every Kubernetes node in one zone: the StatefulSet's spread did not hold.
    let one_zone = |_: &str, args: &[&str]| {
        (args.starts_with(&["get", "node"])).then(|| {
            Ok(r#"{"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-a"}}}"#.to_owned())
        })
    };
    let mut k = Kube::new(Overriding(FakeKubectl::new(), one_zone), &assets());
    k.poll = Duration::from_millis(5);
    let e = format!(
        "{:#}",
        k.install_objects(&garage_image(), Duration::from_secs(5))
            .await
            .unwrap_err()
    );
    assert!(e.contains("two object store nodes in zone zone-a"), "{e}");
    assert!(!k
        .runner
        .0
        .model()
        .commands
        .iter()
        .any(|c| c.contains("layout apply")));
}

#[test]
fn garage_is_pinned_by_its_release_and_is_the_tests_garage() {
    let pinned = std::fs::read_to_string(assets().join("versions.env")).unwrap();
    assert_eq!(
        garage_image(),
        format!("dxflrs/garage:v{}", vfps_testkit::garage::VERSION),
        "one Garage across the tests, the local platform and kind"
    );
    for floating in [
        "dxflrs/garage:latest",
        "dxflrs/garage",
        "dxflrs/garage:main",
    ] {
        let text = pinned.replace(&garage_image(), floating);
        let e = Versions::parse(&text).unwrap_err();
        assert!(e.to_string().contains("not pinned to a release tag"), "{e}");
    }
}

/// The kind run's values point vfps at what `up` makes: the Service and port
/// of garage.yaml, its region, the bucket and the Secret with its keys.
#[test]
fn the_kind_values_point_vfps_at_the_store_the_driver_makes() {
    let values = std::fs::read_to_string(assets().join("vfps-ha-values.yaml")).unwrap();
    let garage = std::fs::read_to_string(assets().join("garage.yaml")).unwrap();
    for line in [
        "  enabled: true".to_owned(),
        "  serviceUrl: http://garage.vfps.svc:3900".to_owned(),
        format!("  bucket: {BUCKET}"),
        "  region: garage".to_owned(),
        format!("  existingSecret: {S3_SECRET}"),
        format!(
            "  existingSecretAccessKeyKey: {}",
            objects::S3_SECRET_ACCESS_KEY
        ),
        format!(
            "  existingSecretSecretKeyKey: {}",
            objects::S3_SECRET_SECRET_KEY
        ),
    ] {
        assert!(
            values.lines().any(|l| l == line),
            "{line:?} not in the values"
        );
    }
    for line in [
        "    s3_region = \"garage\"",
        "    replication_factor = 3",
        "  name: garage",
        "    - {name: s3, port: 3900, targetPort: s3, protocol: TCP}",
        "                secretKeyRef: {name: garage-rpc, key: rpc-secret}",
    ] {
        assert!(
            garage.lines().any(|l| l == line),
            "{line:?} not in garage.yaml"
        );
    }
    assert!(!garage.contains("rpc_secret"), "no secret in the ConfigMap");
}

#[test]
fn the_kill_selects_the_drawn_node_alone() {
    let asset = std::fs::read_to_string(assets().join(objects::OBJECTS_KILL.asset)).unwrap();
    let rendered =
        crate::platform::kind::assets::render_asset(&asset, &[("POD", "garage-2".into())]).unwrap();
    assert!(rendered.contains("  action: pod-kill\n") && rendered.contains("  mode: one\n"));
    assert!(rendered.contains("      vfps: [garage-2]\n"), "{rendered}");
    assert!(rendered.contains(&format!("  name: {}\n", objects::OBJECTS_KILL.name)));
}

#[test]
fn garages_answers_are_read_strictly() {
    let id = node_id(1);
    assert_eq!(objects::node_id_of(&format!("{id}\n")).unwrap(), id);
    assert_eq!(
        objects::node_id_of(&format!("{id}@10.0.0.1:3901")).unwrap(),
        id
    );
    assert!(objects::node_id_of("WARNING: no key").is_err());
    let key = objects::key_of("Key ID:     GK1\nKey name:  vfps\nSecret key: s3cr3t\n").unwrap();
    assert_eq!((key.id.as_str(), key.secret.as_str()), ("GK1", "s3cr3t"));
    assert!(
        !format!("{key:?}").contains("s3cr3t"),
        "a key's Debug hides its secret"
    );
    assert!(
        objects::key_of("Key ID: GK1\nSecret key: (redacted)\n").is_err(),
        "a redacted secret is no key"
    );
    assert!(objects::key_of("Key ID: GK1\n").is_err());
    let health = |status: &str, ok: u64, quorum: u64| {
        serde_json::json!({"status": status, "storageNodes": 3, "storageNodesOk": ok,
                           "partitions": 256, "partitionsQuorum": quorum})
    };
    assert!(objects::healthy(&health("healthy", 3, 256)));
    assert!(!objects::healthy(&health("degraded", 2, 256)));
    assert!(!objects::healthy(&health("healthy", 3, 255)));
    assert!(!objects::healthy(&serde_json::json!({})));
}
