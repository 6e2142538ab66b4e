//! How access tokens are kept: the grants column's JSON, shared by both stores.

use vfps_core::{
    access::{Grant, Permission, TokenKind},
    Error,
};

/// Every column of `access_tokens`, in the order the row mappers read them.
pub(crate) const TOKEN_COLUMNS: &str =
    "id, kind, name, token_hash, is_admin, grants, created_at, expires_at, revoked_at";

/// `[{"namespace": "…", "permissions": ["read", …]}, …]`.
pub(crate) fn encode_grants(grants: &[Grant]) -> String {
    serde_json::Value::Array(
        grants
            .iter()
            .map(|g| {
                serde_json::json!({
                    "namespace": g.namespace,
                    "permissions": g.permissions.iter().map(|p| p.name()).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
    .to_string()
}

pub(crate) fn decode_grants(raw: &str) -> Result<Vec<Grant>, Error> {
    let bad = || Error::internal("an access token's grants column is not valid");
    let value: serde_json::Value = serde_json::from_str(raw).map_err(|_| bad())?;
    let items = value.as_array().ok_or_else(bad)?;
    items
        .iter()
        .map(|item| {
            let namespace = item
                .get("namespace")
                .and_then(|n| n.as_str())
                .ok_or_else(bad)?;
            let permissions = item
                .get("permissions")
                .and_then(|p| p.as_array())
                .ok_or_else(bad)?
                .iter()
                .map(|p| p.as_str().and_then(Permission::parse).ok_or_else(bad))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Grant {
                namespace: namespace.to_owned(),
                permissions,
            })
        })
        .collect()
}

pub(crate) fn decode_kind(raw: &str) -> Result<TokenKind, Error> {
    TokenKind::parse(raw).ok_or_else(|| Error::internal("an access token's kind is not valid"))
}

pub(crate) fn decode_hash(raw: &[u8]) -> Result<vfps_core::access::TokenHash, Error> {
    <[u8; 32]>::try_from(raw)
        .map(vfps_core::access::TokenHash)
        .map_err(|_| Error::internal("an access token's hash is not 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_survive_the_column() {
        let grants = vec![
            Grant::parse("research=read,write").unwrap(),
            Grant::parse("*=reverse-lookup").unwrap(),
        ];
        assert_eq!(decode_grants(&encode_grants(&grants)).unwrap(), grants);
        assert_eq!(decode_grants("[]").unwrap(), vec![]);
        for bad in [
            "",
            "{}",
            "[1]",
            r#"[{"namespace":"x","permissions":["all"]}]"#,
        ] {
            assert!(decode_grants(bad).is_err(), "{bad:?}");
        }
    }
}
