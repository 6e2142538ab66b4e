//! `Init__v1__Namespaces__<N>__*`: namespaces created at start-up if missing.

use std::collections::BTreeMap;

use vfps_core::{GenerationMethod, NamespaceSettings};

use super::env::Env;

/// A namespace to create at start-up if missing (`Init__v1__Namespaces__N__*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitNamespace {
    /// Checked to be a valid namespace name.
    pub name: String,
    /// `…__Description`, empty when unset, as upstream.
    pub description: String,
    /// How its pseudonyms are generated, already validated.
    pub settings: NamespaceSettings,
}

/// `Init__v1__Namespaces__<N>__*`, in index order; a broken entry is reported
/// and left out.
pub(super) fn from_env(env: &Env, errors: &mut Vec<String>) -> Vec<InitNamespace> {
    let mut by_index: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (rest, value) in env.with_prefix("Init__v1__Namespaces__") {
        let Some((index, field)) = rest.split_once("__") else {
            errors.push(format!(
                "Init__v1__Namespaces__{rest}: expected Init__v1__Namespaces__<N>__<Field>"
            ));
            continue;
        };
        let Ok(index) = index.parse::<u32>() else {
            errors.push(format!(
                "Init__v1__Namespaces__{index}: the index must be a number"
            ));
            continue;
        };
        by_index
            .entry(index)
            .or_default()
            .insert(field.to_owned(), value.to_owned());
    }
    let mut out = Vec::new();
    for (i, fields) in by_index {
        let key = |f: &str| format!("Init__v1__Namespaces__{i}__{f}");
        for f in fields.keys() {
            if ![
                "name",
                "description",
                "pseudonymgenerationmethod",
                "pseudonymlength",
                "pseudonymprefix",
                "pseudonymsuffix",
                "pseudonymdeletionallowed",
                "multipseudonym",
                "originalsystem",
            ]
            .contains(&f.as_str())
            {
                errors.push(format!("{}: unknown field", key(f)));
            }
        }
        // Every field's problem, not only the first one's.
        let name = match fields.get("name") {
            None => {
                errors.push(format!("{}: a name is required", key("Name")));
                None
            }
            Some(raw) => match vfps_core::NamespaceName::parse(raw) {
                Ok(_) => Some(raw.clone()),
                Err(e) => {
                    errors.push(format!("{}: {}", key("Name"), e.message));
                    None
                }
            },
        };
        let method = match fields.get("pseudonymgenerationmethod") {
            None => Some(GenerationMethod::SecureRandomBase64UrlEncoded),
            Some(raw) => {
                let m = GenerationMethod::parse_config(raw);
                if m.is_none() {
                    errors.push(format!(
                        "{}={raw:?} is not a pseudonym generation method",
                        key("PseudonymGenerationMethod")
                    ));
                }
                m
            }
        };
        let length = match fields.get("pseudonymlength") {
            None => Some(
                method
                    .and_then(GenerationMethod::fixed_length)
                    .unwrap_or(32),
            ),
            Some(raw) => {
                let n = raw.trim().parse::<u32>().ok();
                if n.is_none() {
                    errors.push(format!(
                        "{}={raw:?} is not a whole number",
                        key("PseudonymLength")
                    ));
                }
                n
            }
        };
        let (Some(name), Some(method), Some(length)) = (name, method, length) else {
            continue;
        };
        // A true/false field, false when absent; a bad value is named.
        let mut flag = |field: &str, spelled: &str| -> Option<bool> {
            match fields.get(field).map(|v| v.to_ascii_lowercase()) {
                None => Some(false),
                Some(v) if v == "true" => Some(true),
                Some(v) if v == "false" => Some(false),
                Some(v) => {
                    errors.push(format!("{}={v:?} is not true or false", key(spelled)));
                    None
                }
            }
        };
        let deletable = flag("pseudonymdeletionallowed", "PseudonymDeletionAllowed");
        let multi = flag("multipseudonym", "MultiPseudonym");
        let (Some(deletable), Some(multi)) = (deletable, multi) else {
            continue;
        };
        let nonempty = |f: &str| fields.get(f).filter(|v| !v.is_empty()).cloned();
        match NamespaceSettings::parse(
            method,
            length,
            nonempty("pseudonymprefix"),
            nonempty("pseudonymsuffix"),
        )
        .and_then(|s| {
            let system = nonempty("originalsystem")
                .as_deref()
                .map(vfps_core::OriginalSystem::parse)
                .transpose()?;
            Ok(s.with_deletion(deletable)
                .with_multi(multi)?
                .with_original_system(system))
        }) {
            Ok(settings) => out.push(InitNamespace {
                name: name.clone(),
                description: fields.get("description").cloned().unwrap_or_default(),
                settings,
            }),
            Err(e) => errors.push(format!("Init__v1__Namespaces__{i}: {}", e.message)),
        }
    }
    out
}
