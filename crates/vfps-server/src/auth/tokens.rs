//! Access tokens of the database: looked up by the SHA-256 of the bearer
//! credential. Unknown, revoked and expired tokens are refused alike, so the
//! answer says nothing about which tokens exist.

use std::{
    sync::Arc,
    time::{Instant, SystemTime},
};

use vfps_core::{
    access::{TokenHash, TokenKind},
    Error,
};
use vfps_store::Store;

use super::{Access, Principal};

pub struct Verifier {
    store: Arc<dyn Store>,
}

impl Verifier {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// The token's principal; the database's transient failures retried
    /// until `deadline`.
    pub async fn verify(
        &self,
        credential: &str,
        kind: TokenKind,
        deadline: Instant,
    ) -> Result<Principal, Error> {
        let hash = TokenHash::of(credential);
        let found =
            super::retry_transient(deadline, "access token", || self.store.find_token(&hash))
                .await?;
        let now = SystemTime::now();
        match found {
            Some(t) if t.kind == kind && t.usable(now) => Ok(Principal {
                subject: format!("token:{}", t.id),
                token_id: Some(t.id),
                access: Access::Grants {
                    admin: t.admin,
                    grants: t.grants,
                },
                valid_until: t.expires_at,
            }),
            _ => Err(Error::unauthenticated(
                "the access token is unknown, revoked or expired",
            )),
        }
    }
}
