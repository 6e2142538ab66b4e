//! `vfps keys rotate | status | reseal`: the namespaces' key versions, run
//! against the database with the replicas' own `VFPS_KEYS` (docs/privacy.md,
//! "Rotating keys"). A rotation starts a new key version; the running
//! replicas take it up for new seals and re-seal the older versions'
//! originals in the background; `status` shows how far that got, and
//! `reseal` does it in the foreground, with progress.

use std::{sync::Arc, time::Instant};

use anyhow::{anyhow, bail};
use clap::Subcommand;
use vfps_core::{Namespace, NamespaceName};
use vfps_store::Store;

use crate::config::Settings;

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Start a new key version of every sealed namespace (or of those
    /// named): replicas seal new originals under it within
    /// VFPS_KEYS_REFRESH_INTERVAL and re-seal the older versions'
    /// originals in the background; pseudonyms and lookups are unchanged.
    Rotate {
        /// A sealed namespace's name; repeatable. Default: every sealed one.
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
        /// Also move the blind indexes to the new key version (a re-index,
        /// online): every row is re-indexed here (and by the replicas in
        /// the background); no original changes its pseudonym.
        #[arg(long)]
        reindex: bool,
    },
    /// Each sealed namespace's key versions, and how many of its originals
    /// each one seals.
    Status {
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
    },
    /// Re-seal, now and here, every original under an older key version
    /// than its namespace's newest (what replicas do in the background).
    Reseal {
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
    },
    /// Seal the originals of namespaces that keep them plain (every one, or
    /// those named), online: from now on they are written sealed, and every
    /// stored one is sealed here (and by the replicas in the background).
    EncryptExisting {
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
    },
    /// Keep the originals of sealed namespaces (every one, or those named)
    /// plain again, online: from now on they are written plain, and every
    /// stored one is opened and kept plain here (and by the replicas).
    DecryptAll {
        #[arg(long = "namespace")]
        namespaces: Vec<String>,
    },
    /// Rewrap every namespace's stored keys under VFPS_KEYS where
    /// VFPS_KEYS_PREVIOUS wrapped them (a wrapping-key rotation: a new key
    /// file, token key or KMS key); sealed originals are not touched.
    Rewrap,
}

pub async fn run(
    settings: &Settings,
    store: Arc<dyn Store>,
    command: KeysCommand,
) -> anyhow::Result<()> {
    let source = settings.keys.as_ref().ok_or_else(|| {
        anyhow!("VFPS_KEYS is not set: give the key source the replicas use (file:PATH, pkcs11:…, aws-kms:ARN)")
    })?;
    let failed = |e: vfps_core::Error| anyhow!("{}", e.message);
    let keyring = crate::keys::keyring(settings, source, store.clone()).map_err(failed)?;
    match command {
        KeysCommand::Rotate {
            namespaces,
            reindex,
        } => {
            for ns in sealed(store.as_ref(), &namespaces).await? {
                if reindex && ns.settings.moving {
                    bail!(
                        "{}: a move of its originals is under way; run this once it is done",
                        ns.name
                    );
                }
                let version = keyring.rotate(ns.uid).await.map_err(failed)?;
                println!("{}: key version {version}", ns.name);
                if reindex {
                    if !keyring.reindex(&ns).await.map_err(failed)? {
                        bail!("{}: its blind indexes could not be moved to key version {version} (another move began)", ns.name);
                    }
                    carry_out(store.as_ref(), &keyring, &ns, "re-indexed").await?;
                }
            }
            eprintln!(
                "vfps keys: replicas seal new originals under the new versions within \
                 VFPS_KEYS_REFRESH_INTERVAL and re-seal older ones in the background \
                 (`vfps keys status` shows how far)"
            );
        }
        KeysCommand::Status { namespaces } => {
            let mut wrapped_by = std::collections::BTreeMap::<String, usize>::new();
            for ns in sealed(store.as_ref(), &namespaces).await? {
                let newest = keyring.refresh(ns.uid).await.map_err(failed)?;
                let counts = store.sealed_versions(&ns.name).await.map_err(failed)?;
                let moving = match (ns.settings.moving, ns.settings.moving_from_index) {
                    (true, Some(v)) => format!(", being moved from key version {v}"),
                    (true, None) => ", being moved from plain originals".to_owned(),
                    (false, _) => String::new(),
                };
                println!(
                    "{}; blind indexes under key version {}{moving}",
                    status_line(&ns.name, newest, &counts),
                    ns.settings.index_version
                );
                for k in store.namespace_keys(ns.uid).await.map_err(failed)? {
                    *wrapped_by.entry(k.wrapped_by).or_default() += 1;
                }
            }
            for (key, n) in wrapped_by {
                println!("key versions wrapped by key {key}: {n}");
            }
        }
        KeysCommand::EncryptExisting { namespaces } => {
            let chosen = chosen(store.as_ref(), &namespaces, |ns| {
                !ns.settings.sealed || ns.settings.moving
            })
            .await?;
            move_all(store.as_ref(), &keyring, chosen, true).await?;
        }
        KeysCommand::DecryptAll { namespaces } => {
            let chosen = chosen(store.as_ref(), &namespaces, |ns| {
                ns.settings.sealed || ns.settings.moving
            })
            .await?;
            move_all(store.as_ref(), &keyring, chosen, false).await?;
        }
        KeysCommand::Rewrap => {
            let (rewrapped, already) = keyring.rewrap().await.map_err(failed)?;
            println!(
                "rewrapped {rewrapped} key versions; {already} already were under the current key"
            );
            eprintln!(
                "vfps keys: every namespace key is wrapped by VFPS_KEYS; VFPS_KEYS_PREVIOUS can \
                 go once every replica runs with this VFPS_KEYS"
            );
        }
        KeysCommand::Reseal { namespaces } => {
            for ns in sealed(store.as_ref(), &namespaces).await? {
                let started = Instant::now();
                let mut said = Instant::now();
                let done = keyring
                    .reseal(&ns, |p| {
                        if said.elapsed().as_secs() >= 1 {
                            said = Instant::now();
                            eprintln!("vfps keys: {}: {} re-sealed so far", ns.name, p.resealed);
                        }
                    })
                    .await
                    .map_err(failed)?;
                eprintln!(
                    "vfps keys: {}: {} re-sealed, {} changed by others meanwhile, in {:.1} s",
                    ns.name,
                    done.resealed,
                    done.skipped,
                    started.elapsed().as_secs_f64()
                );
                if done.unopened > 0 {
                    bail!(
                        "{}: {} sealed originals open under no stored key version; left as they are",
                        ns.name,
                        done.unopened
                    );
                }
            }
        }
    }
    Ok(())
}

/// The namespaces named (each must exist), or every one `wanted` takes.
async fn chosen(
    store: &dyn Store,
    names: &[String],
    wanted: impl Fn(&Namespace) -> bool,
) -> anyhow::Result<Vec<Namespace>> {
    let all = store
        .list_namespaces()
        .await
        .map_err(|e| anyhow!("{}", e.message))?;
    if names.is_empty() {
        return Ok(all.into_iter().filter(|ns| wanted(ns)).collect());
    }
    names
        .iter()
        .map(|name| {
            let parsed = NamespaceName::parse(name)
                .map_err(|e| anyhow!("--namespace {name:?}: {}", e.message))?;
            all.iter()
                .find(|ns| ns.name == parsed)
                .cloned()
                .ok_or_else(|| anyhow!("no namespace is named {name:?}"))
        })
        .collect()
}

/// Moves each namespace's rows to sealed (or plain) originals: the switch
/// (after which no row of the old form is written), then passes over its
/// rows until none of the old form is left, with progress.
async fn move_all(
    store: &dyn Store,
    keyring: &vfps_keys::Keyring,
    namespaces: Vec<Namespace>,
    sealed: bool,
) -> anyhow::Result<()> {
    let failed = |e: vfps_core::Error| anyhow!("{}", e.message);
    let form = if sealed { "sealed" } else { "plain" };
    for ns in namespaces {
        if ns.settings.moving_from_index.is_some() {
            bail!(
                "{}: a re-index is under way; run this once it is done",
                ns.name
            );
        }
        if !store
            .move_originals(&ns.name, ns.uid, sealed)
            .await
            .map_err(failed)?
        {
            println!("{}: already keeps its originals {form}", ns.name);
            continue;
        }
        carry_out(store, keyring, &ns, &format!("made {form}")).await?;
        println!("{}: it keeps its originals {form}", ns.name);
    }
    Ok(())
}

/// Passes over the rows of `ns`, whose move was switched on, until none of
/// the old form is left, with progress; says how many rows were `done`.
async fn carry_out(
    store: &dyn Store,
    keyring: &vfps_keys::Keyring,
    ns: &Namespace,
    done: &str,
) -> anyhow::Result<()> {
    let failed = |e: vfps_core::Error| anyhow!("{}", e.message);
    let started = Instant::now();
    let mut said = Instant::now();
    let mut moved = 0;
    for _ in 0..100 {
        let now = store
            .get_namespace(&ns.name)
            .await
            .map_err(failed)?
            .filter(|n| n.uid == ns.uid)
            .ok_or_else(|| anyhow!("namespace {} was deleted meanwhile", ns.name))?;
        if !now.settings.moving {
            // Ended by a replica's pass meanwhile.
            println!(
                "{}: {moved} rows {done} here in {:.1} s, the rest by the replicas",
                ns.name,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        let pass = keyring
            .move_rows(&now, |p| {
                if said.elapsed().as_secs() >= 1 {
                    said = Instant::now();
                    eprintln!(
                        "vfps keys: {}: {} rows {done} so far",
                        ns.name,
                        moved + p.moved
                    );
                }
            })
            .await
            .map_err(failed)?;
        moved += pass.moved;
        if pass.unopened > 0 {
            bail!(
                "{}: {} sealed originals open under no stored key version; left as they are",
                ns.name,
                pass.unopened
            );
        }
        if pass.finished {
            println!(
                "{}: {moved} rows {done} in {:.1} s",
                ns.name,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
    }
    bail!(
        "{}: rows keep changing under the move; run it again",
        ns.name
    )
}

/// The sealed namespaces named (each must exist and be sealed), or every
/// sealed one.
async fn sealed(store: &dyn Store, names: &[String]) -> anyhow::Result<Vec<Namespace>> {
    let all = store
        .list_namespaces()
        .await
        .map_err(|e| anyhow!("{}", e.message))?;
    if names.is_empty() {
        return Ok(all.into_iter().filter(|ns| ns.settings.sealed).collect());
    }
    names
        .iter()
        .map(|name| {
            let parsed = NamespaceName::parse(name)
                .map_err(|e| anyhow!("--namespace {name:?}: {}", e.message))?;
            match all.iter().find(|ns| ns.name == parsed) {
                Some(ns) if ns.settings.sealed => Ok(ns.clone()),
                Some(_) => bail!("namespace {name:?} keeps its originals plain: no keys to rotate"),
                None => bail!("no namespace is named {name:?}"),
            }
        })
        .collect()
}

/// One namespace's line of `vfps keys status`.
fn status_line(name: &NamespaceName, newest: Option<u32>, counts: &[(u32, u64)]) -> String {
    let Some(newest) = newest else {
        return format!("{name}: no keys yet (made with its first original)");
    };
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let under_newest = counts
        .iter()
        .find(|(v, _)| *v == newest)
        .map_or(0, |(_, n)| *n);
    let by_version: Vec<String> = counts.iter().map(|(v, n)| format!("v{v} {n}")).collect();
    let share = match total {
        0 => 100.0,
        t => under_newest as f64 * 100.0 / t as f64,
    };
    format!(
        "{name}: newest key version {newest}; sealed originals by version: {} ({share:.1} % under the newest)",
        match by_version.is_empty() {
            true => "none".to_owned(),
            false => by_version.join(", "),
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_says_how_much_is_under_the_newest_version() {
        let n = NamespaceName::parse("research").unwrap();
        assert_eq!(
            status_line(&n, Some(2), &[(1, 25), (2, 75)]),
            "research: newest key version 2; sealed originals by version: v1 25, v2 75 (75.0 % under the newest)"
        );
        assert_eq!(
            status_line(&n, Some(1), &[]),
            "research: newest key version 1; sealed originals by version: none (100.0 % under the newest)"
        );
        assert!(status_line(&n, None, &[]).contains("no keys yet"));
    }
}
