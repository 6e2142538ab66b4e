//! `vfps-chaos local restore` never makes things worse: mistakes are refused
//! before anything is destroyed (exit 1, named), a restore that fails at a
//! step or is killed leaves the old cluster serving every write it
//! acknowledged, and every file the platform writes with a key or a
//! password in it is its owner's alone. Needs root, Patroni, etcd, Garage
//! and barman-cli-cloud; `scripts/test.sh` runs it.

#![allow(clippy::unwrap_used)]

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use tonic::{metadata::MetadataValue, transport::Channel, Request};
use vfps_chaos::{
    backup::Archiving,
    platform::local::{self, grpc_endpoints, Local, Options},
};
use vfps_proto::v1::{
    namespace_service_client::NamespaceServiceClient,
    pseudonym_service_client::PseudonymServiceClient, NamespaceServiceCreateRequest,
    PseudonymServiceCreateRequest, PseudonymServiceGetRequest,
};

fn vfps_bin() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .parent()
        .unwrap()
        .join("vfps")
}

/// `vfps-chaos local restore --to <to>` on `base`, with `env`; exit code and
/// stderr.
fn restore(base: &Path, to: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(["local", "restore", "--to", to, "--base"])
        .arg(base)
        .env("VFPS_BIN", vfps_bin())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Api {
    pseudonyms: PseudonymServiceClient<Channel>,
    namespaces: NamespaceServiceClient<Channel>,
    token: String,
}

impl Api {
    fn new(base: &Path) -> Self {
        let first = grpc_endpoints().split(',').next().unwrap().to_owned();
        let channel = Channel::from_shared(first).unwrap().connect_lazy();
        let token = std::fs::read_to_string(base.join("tokens/load.token")).unwrap();
        Self {
            pseudonyms: PseudonymServiceClient::new(channel.clone()),
            namespaces: NamespaceServiceClient::new(channel),
            token: token.trim().to_owned(),
        }
    }

    fn authed<T>(&self, m: T) -> Request<T> {
        let mut r = Request::new(m);
        r.set_timeout(Duration::from_secs(10));
        r.metadata_mut().insert(
            "authorization",
            MetadataValue::try_from(format!("Bearer {}", self.token)).unwrap(),
        );
        r
    }

    async fn create(&self, original: &str) -> String {
        self.pseudonyms
            .clone()
            .create(self.authed(PseudonymServiceCreateRequest {
                namespace: "kept".into(),
                original_value: original.into(),
            }))
            .await
            .unwrap()
            .into_inner()
            .pseudonym
            .unwrap()
            .pseudonym_value
    }

    /// Every acknowledged write resolves, through the cluster as it is now.
    async fn all_resolve(&self, written: &[(String, String)]) {
        for (original, pseudonym) in written {
            let got = self
                .pseudonyms
                .clone()
                .get(self.authed(PseudonymServiceGetRequest {
                    namespace: "kept".into(),
                    pseudonym_value: pseudonym.clone(),
                }))
                .await
                .unwrap_or_else(|e| panic!("an acknowledged write does not resolve: {e:?}"));
            assert_eq!(
                got.into_inner()
                    .pseudonym
                    .unwrap()
                    .original_value
                    .as_deref(),
                Some(original.as_str())
            );
        }
    }
}

/// Every file under `base` that holds one of `secrets` is its owner's alone.
fn secrets_are_private(base: &Path, secrets: &[String]) {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                // PostgreSQL's and Garage's own data: theirs to keep.
                if !["data", "etcd", "meta", "blocks"]
                    .iter()
                    .any(|d| p.ends_with(d))
                {
                    walk(&p, out);
                }
            } else if m.is_file() && m.len() < 1 << 20 {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(base, &mut files);
    let mut holding = 0;
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap_or_default()).into_owned();
        if secrets.iter().any(|s| text.contains(s.as_str())) {
            holding += 1;
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(
                mode & 0o077,
                0,
                "{} holds a secret and is mode {mode:o}",
                f.display()
            );
        }
    }
    assert!(
        holding >= 5,
        "only {holding} files hold a secret: the search looked in the wrong place"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, Patroni, etcd, Garage and barman-cli-cloud (creates network namespaces): scripts/test.sh runs it with --include-ignored"]
async fn a_restore_never_makes_things_worse() {
    let base = std::env::temp_dir().join(format!("vfps-chaos-restore-test-{}", std::process::id()));
    let opts = Options {
        base: base.clone(),
        vfps_bin: vfps_bin(),
        restart_backoff: Duration::from_secs(1),
        grace_period: Duration::from_secs(10),
        profile: local::DatabaseProfile::Safe,
        ui: false,
        ui_tests_dir: PathBuf::new(),
        backup: Some(Archiving {
            timeout: Duration::from_secs(3),
        }),
        sealed: true,
    };
    let l = Local::up(opts, &|e| eprintln!("up: {e}")).await.unwrap();
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(steps(&l))).await;
    l.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn steps(l: &Local) {
    let base = &l.opts.base;
    // Every file that holds a key or a password: the database's passwords,
    // the object store's RPC secret and keys, the access tokens.
    let mut secrets: Vec<String> = vec!["local-superuser".into(), "vfps-local-password".into()];
    for f in ["s3-backup-key", "s3-key", "tokens/load.token"] {
        if let Ok(t) = std::fs::read_to_string(base.join(f)) {
            secrets.extend(
                t.lines()
                    .skip(usize::from(f.starts_with("s3")))
                    .map(str::to_owned),
            );
        }
    }
    secrets.retain(|s| s.len() >= 8);
    secrets_are_private(base, &secrets);
    for f in ["s3-backup-key", "db-a/patroni.yml"] {
        let m = std::fs::metadata(base.join(f)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "{f}");
        if f.ends_with("patroni.yml") {
            assert_ne!(m.uid(), 0, "patroni.yml is postgres's");
        }
    }

    let api = Api::new(base);
    api.namespaces
        .clone()
        .create(api.authed(NamespaceServiceCreateRequest {
            name: "kept".into(),
            pseudonym_generation_method: 5,
            pseudonym_length: 16,
            ..Default::default()
        }))
        .await
        .unwrap();
    let mut written = Vec::new();
    for i in 0..50 {
        let o = format!("subject-{i}");
        let p = api.create(&o).await;
        written.push((o, p));
    }

    // Mistakes: refused before anything is touched, exit 1, named.
    let future = "2099-01-01T00:00:00Z";
    let (code, said) = restore(base, future, &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("refused:") && said.contains("in the future"),
        "{said}"
    );
    let (code, said) = restore(base, "2000-01-01T00:00:00Z", &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("refused:") && said.contains("no completed base backup"),
        "{said}"
    );
    // A target after the last archived commit (nothing written since; the
    // archive is quiet): recovery would end before reaching it.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let just_now = vfps_chaos::backup::plan::format_utc(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - 1,
    );
    let (code, said) = restore(base, &just_now, &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("no commit after"), "{said}");
    api.all_resolve(&written).await;

    // A restore that fails at a step puts the old cluster back, serving
    // every acknowledged write; the name archiving uses is unchanged.
    let cluster = std::fs::read_to_string(base.join("backup-cluster")).ok();
    for at in ["set-aside", "bootstrap", "hold"] {
        let (code, said) = restore(base, "latest", &[("VFPS_CHAOS_RESTORE_FAIL_AT", at)]);
        assert_eq!(code, Some(2), "{at}: {said}");
        assert!(
            said.contains("the cluster was put back as it was"),
            "{at}: {said}"
        );
        api.all_resolve(&written).await;
        let o = format!("after-{at}");
        let p = api.create(&o).await;
        written.push((o, p));
        assert_eq!(
            std::fs::read_to_string(base.join("backup-cluster")).ok(),
            cluster,
            "{at}"
        );
    }

    // Killed mid-restore: the next restore puts the old cluster back first.
    let mut child = Command::new(env!("CARGO_BIN_EXE_vfps-chaos"))
        .args(["local", "restore", "--to", "latest", "--base"])
        .arg(base)
        .env("VFPS_BIN", vfps_bin())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let reached = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("restore: recovery"));
    assert!(reached, "the restore never reached its recovery");
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, said) = restore(base, "latest", &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("an earlier restore was interrupted"),
        "{said}"
    );
    api.all_resolve(&written).await;
    assert!(!l.restore_interrupted());
}
