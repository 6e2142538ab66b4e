//! Creating, showing and revoking access tokens: shared by the admin API, the
//! admin UI and `vfps tokens …`.
//!
//! Through the API and the UI a caller mints ([`mint`]) as itself: an admin,
//! granting only rights it holds, every mint and revoke an audit event that
//! names it and the grants. `vfps tokens create` works on the database
//! directly: whoever holds the database's credentials holds every right
//! already, and it is how the first admin token comes to be.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use vfps_core::{
    access::{Grant, TokenKind, TokenRecord, TokenSecret},
    Error,
};
use vfps_store::Store;

use crate::auth::{
    audit::{Event, TokenChange},
    Auth, Operation, Principal,
};

/// Longest lifetime a token may be given: ten years.
const MAX_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Most grants one token may carry.
const MAX_GRANTS: usize = 100;

/// A validated request for a token.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub kind: TokenKind,
    pub name: String,
    pub admin: bool,
    pub grants: Vec<Grant>,
    pub expires_in: Option<Duration>,
}

impl NewToken {
    pub fn parse(
        kind: &str,
        name: &str,
        admin: bool,
        grants: &[String],
        expires_in: Option<Duration>,
    ) -> Result<Self, Error> {
        let kind = TokenKind::parse(kind).ok_or_else(|| {
            Error::invalid_argument(format!(
                "token kind {kind:?} is not service-account or personal"
            ))
        })?;
        if grants.len() > MAX_GRANTS {
            return Err(Error::invalid_argument(format!(
                "a token carries at most {MAX_GRANTS} grants"
            )));
        }
        if expires_in.is_some_and(|e| e < Duration::from_secs(1) || e > MAX_LIFETIME) {
            return Err(Error::invalid_argument(
                "a token's lifetime must be between 1 second and 10 years",
            ));
        }
        Ok(Self {
            kind,
            name: name.to_owned(),
            admin,
            grants: grants
                .iter()
                .map(|g| Grant::parse(g))
                .collect::<Result<_, _>>()?,
            expires_in,
        })
    }
}

impl NewToken {
    /// What the token grants, as an audit event names it.
    fn describe(&self) -> String {
        let mut parts: Vec<String> = self.grants.iter().map(ToString::to_string).collect();
        if self.admin {
            parts.insert(0, "admin".to_owned());
        }
        parts.join(" ")
    }
}

/// Mints a token for `minter`, who must be an admin and hold every right
/// the token grants; an audit event whatever the outcome. The token ends
/// when the minter's credential does, if not before (a JWT's expiry, a UI
/// session's end, a minting token's own): no right outlives the credential
/// that handed it on.
pub async fn mint(
    auth: &Auth,
    store: &dyn Store,
    minter: &Principal,
    new: NewToken,
) -> Result<(TokenRecord, TokenSecret), Error> {
    let grants = new.describe();
    let result = async {
        auth.authorize(minter, Operation::CreateToken, None)?;
        auth.may_grant(minter, new.admin, &new.grants)?;
        create_until(store, new, minter.valid_until).await
    }
    .await;
    auth.record(&Event {
        principal: Some(minter),
        operation: Operation::CreateToken,
        namespace: "",
        job: None,
        token: Some(TokenChange {
            id: result.as_ref().map_or("", |(r, _)| r.id.as_str()),
            grants: &grants,
        }),
        outcome: result.as_ref().map(|_| 1).map_err(|e| e.kind),
    });
    result
}

/// Revokes token `id` for `revoker` (an admin); an audit event whatever the
/// outcome. `false` if there is none with this id.
pub async fn revoke_as(
    auth: &Auth,
    store: &dyn Store,
    revoker: &Principal,
    id: &str,
) -> Result<bool, Error> {
    let result = async {
        auth.authorize(revoker, Operation::RevokeToken, None)?;
        revoke(store, id).await
    }
    .await;
    // Only an id that could be one is written: the path is the caller's.
    let shown = if id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        id
    } else {
        "<invalid>"
    };
    auth.record(&Event {
        principal: Some(revoker),
        operation: Operation::RevokeToken,
        namespace: "",
        job: None,
        token: Some(TokenChange {
            id: shown,
            grants: "",
        }),
        outcome: match &result {
            Ok(true) => Ok(1),
            Ok(false) => Err(vfps_core::ErrorKind::NotFound),
            Err(e) => Err(e.kind),
        },
    });
    result
}

/// Mints and stores a token, unchecked (the operator's `vfps tokens create`);
/// the secret is the caller's to show, once.
pub async fn create(store: &dyn Store, new: NewToken) -> Result<(TokenRecord, TokenSecret), Error> {
    create_until(store, new, None).await
}

/// [`create`], the token's expiry no later than `cap` (when there is one).
async fn create_until(
    store: &dyn Store,
    new: NewToken,
    cap: Option<SystemTime>,
) -> Result<(TokenRecord, TokenSecret), Error> {
    let expires_at = capped(new.expires_in.map(|e| vfps_core::now_micros() + e), cap);
    if expires_at.is_some_and(|at| at <= SystemTime::now()) {
        return Err(Error::unauthenticated(
            "the credential minting the token has expired",
        ));
    }
    let (record, secret) =
        TokenRecord::new(new.kind, &new.name, new.admin, new.grants, expires_at)?;
    store.insert_token(&record).await?;
    tracing::info!(
        token_id = %record.id,
        kind = record.kind.name(),
        admin = record.admin,
        grants = record.grants.len(),
        "access token created"
    );
    Ok((record, secret))
}

/// Revokes a token; `false` if there is none with this id.
pub async fn revoke(store: &dyn Store, id: &str) -> Result<bool, Error> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Error::invalid_argument(
            "a token id is up to 64 letters and digits",
        ));
    }
    let revoked = store.revoke_token(id, vfps_core::now_micros()).await?;
    if revoked {
        tracing::info!(token_id = %id, "access token revoked");
    }
    Ok(revoked)
}

/// The earlier of an asked expiry (`None`: never) and a cap (`None`: none).
fn capped(asked: Option<SystemTime>, cap: Option<SystemTime>) -> Option<SystemTime> {
    match (asked, cap) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let ts = pbjson_types::Timestamp {
        seconds: secs,
        nanos: 0,
    };
    serde_json::to_value(ts)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A token as shown to admins: no plaintext, no hash.
pub fn to_json(t: &TokenRecord) -> Value {
    json!({
        "id": t.id,
        "kind": t.kind.name(),
        "name": t.name,
        "admin": t.admin,
        "grants": t.grants.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "createdAt": rfc3339(t.created_at),
        "expiresAt": t.expires_at.map(rfc3339),
        "revokedAt": t.revoked_at.map(rfc3339),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_expiry_is_capped_at_the_minters() {
        let t = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(capped(None, None), None);
        assert_eq!(capped(t(5), None), t(5));
        assert_eq!(capped(None, t(9)), t(9), "no expiry asked: the minter's");
        assert_eq!(capped(t(5), t(9)), t(5));
        assert_eq!(capped(t(12), t(9)), t(9));
    }

    /// A lifetime under a second made a token already dead when printed.
    #[test]
    fn lifetimes_under_a_second_are_refused() {
        let parse = |e: Duration| NewToken::parse("personal", "x", false, &[], Some(e));
        for bad in [
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_millis(999),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.message.contains("between 1 second"), "{bad:?}: {e:?}");
        }
        assert!(parse(Duration::from_secs(1)).is_ok());
    }
}
