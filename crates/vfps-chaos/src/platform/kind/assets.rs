//! Chaos Mesh assets made into objects: `${NAME}` placeholders filled, the
//! one-shot objects named, durations written as Chaos Mesh reads them, and
//! the pod selectors the faults and their proofs share.

use std::time::Duration;

/// Fills `${NAME}` placeholders from `var`; a placeholder without a value is an
/// error naming it (a manifest is never applied half-rendered).
pub fn render(template: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated placeholder in {:?}", &rest[at..]))?;
        let name = &after[..end];
        let value = var(name).ok_or_else(|| format!("no value for ${{{name}}}"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Every database instance pod. `cnpg.io/cluster` alone also selects the
/// pods of CloudNativePG's Jobs (initdb, join), which stay until the cluster
/// is healthy.
pub(crate) const DB_PODS: &str = "cnpg.io/cluster=vfps-db,cnpg.io/podRole=instance";

/// The standbys.
pub(crate) const STANDBY_PODS: &str = "cnpg.io/cluster=vfps-db,cnpg.io/instanceRole=replica";

/// A one-shot chaos object: its asset, kind and name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneShot {
    pub asset: &'static str,
    pub kind: &'static str,
    pub name: &'static str,
}

/// A chaos object's `duration`: the hold plus 30 s of slack, so Chaos Mesh
/// heals it by itself should the driver die.
pub fn chaos_duration(hold: Duration) -> String {
    format!("{}s", hold.as_secs() + 30)
}

/// Go-style duration for Chaos Mesh (`200ms`).
pub fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Renders an asset with `vars`; placeholders it does not use are ignored,
/// and any left without a value is an error naming it.
pub fn render_asset(template: &str, vars: &[(&str, String)]) -> anyhow::Result<String> {
    render(template, |k| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .map_err(anyhow::Error::msg)
}
