//! Invalid input, each kind with the code the service documents for it
//! (docs/chaos.md has the table). The kinds take turns.

use tonic::Code;
use vfps_client::{Client, Outcome, Until};

use crate::config::RefusedTokens;
use vfps_proto::v1::{NamespaceServiceCreateRequest, PseudonymServiceListRequest};

/// One kind of invalid call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadInput {
    /// A Create whose original contains U+0000 (no store can keep it alike).
    NulOriginal,
    /// A Create whose original is longer than the 2048 bytes allowed.
    OversizeOriginal,
    /// A Create whose original is blank.
    BlankOriginal,
    /// A Create into a namespace that does not exist.
    UnknownNamespace,
    /// A namespace with a generation method that does not exist.
    InvalidMethod,
    /// A namespace with pseudonym length 0.
    ZeroLength,
    /// A SHA-256 namespace whose length is not 64.
    WrongFixedLength,
    /// A List with a page token the service never issued.
    MalformedPageToken,
    /// A Get of a pseudonym containing U+0000.
    NulPseudonym,
    /// A well-formed Create without a token, to a service that wants one.
    MissingToken,
    /// A well-formed Create with an expired token.
    ExpiredToken,
    /// A well-formed Create with a token that may only read.
    ReadOnlyToken,
}

impl BadInput {
    pub const ALL: [BadInput; 9] = [
        BadInput::NulOriginal,
        BadInput::OversizeOriginal,
        BadInput::BlankOriginal,
        BadInput::UnknownNamespace,
        BadInput::InvalidMethod,
        BadInput::ZeroLength,
        BadInput::WrongFixedLength,
        BadInput::MalformedPageToken,
        BadInput::NulPseudonym,
    ];

    /// The kinds a run sends: every invalid input, and the refused
    /// credentials it has.
    pub fn kinds(refused: &RefusedTokens) -> Vec<BadInput> {
        let mut kinds = Self::ALL.to_vec();
        if refused.missing {
            kinds.push(BadInput::MissingToken);
        }
        if refused.expired.is_some() {
            kinds.push(BadInput::ExpiredToken);
        }
        if refused.read_only.is_some() {
            kinds.push(BadInput::ReadOnlyToken);
        }
        kinds
    }

    pub fn name(self) -> &'static str {
        match self {
            BadInput::NulOriginal => "original with U+0000",
            BadInput::OversizeOriginal => "original over 2048 bytes",
            BadInput::BlankOriginal => "blank original",
            BadInput::UnknownNamespace => "Create in an unknown namespace",
            BadInput::InvalidMethod => "namespace with an unknown generation method",
            BadInput::ZeroLength => "namespace with pseudonym length 0",
            BadInput::WrongFixedLength => "SHA-256 namespace with length 32",
            BadInput::MalformedPageToken => "List with a malformed page token",
            BadInput::NulPseudonym => "Get of a pseudonym with U+0000",
            BadInput::MissingToken => "Create without a token",
            BadInput::ExpiredToken => "Create with an expired token",
            BadInput::ReadOnlyToken => "Create with a read-only token",
        }
    }

    /// The documented answer.
    pub fn expected(self) -> Code {
        match self {
            BadInput::UnknownNamespace => Code::NotFound,
            BadInput::ZeroLength | BadInput::WrongFixedLength => Code::OutOfRange,
            BadInput::MissingToken | BadInput::ExpiredToken => Code::Unauthenticated,
            BadInput::ReadOnlyToken => Code::PermissionDenied,
            _ => Code::InvalidArgument,
        }
    }

    /// Makes the call; `unique` names what it may create (never a real namespace).
    pub async fn call(
        self,
        client: &Client,
        refused: &RefusedTokens,
        namespace: &str,
        unique: &str,
        until: Until,
    ) -> Code {
        let with_token = |token: Option<&str>| {
            let other = client.with_bearer(token);
            async move {
                match other {
                    Ok(c) => c.create(namespace, unique, until).await.code(),
                    Err(_) => Code::InvalidArgument,
                }
            }
        };
        let create = |original: String| async move {
            client.create(namespace, &original, until).await.code()
        };
        let create_namespace = |method: i32, length: u32| async move {
            client
                .create_namespace(
                    NamespaceServiceCreateRequest {
                        name: unique.to_owned(),
                        pseudonym_generation_method: method,
                        pseudonym_length: length,
                        ..Default::default()
                    },
                    until,
                )
                .await
                .code()
        };
        match self {
            BadInput::NulOriginal => create(format!("bad\u{0}{unique}")).await,
            BadInput::OversizeOriginal => create("x".repeat(3000)).await,
            BadInput::BlankOriginal => create("   ".into()).await,
            BadInput::UnknownNamespace => client.create(unique, "an original", until).await.code(),
            BadInput::InvalidMethod => create_namespace(99, 32).await,
            BadInput::ZeroLength => create_namespace(3, 0).await,
            BadInput::WrongFixedLength => create_namespace(2, 32).await,
            BadInput::MalformedPageToken => client
                .list(
                    PseudonymServiceListRequest {
                        namespace: namespace.to_owned(),
                        page_size: 5,
                        page_token: "not a token this service issued".into(),
                        include_total_size: false,
                    },
                    until,
                )
                .await
                .code(),
            BadInput::NulPseudonym => match client.get(namespace, "p\u{0}q", until).await {
                Outcome::Ok(_) => Code::Ok,
                other => other.code(),
            },
            BadInput::MissingToken => with_token(None).await,
            BadInput::ExpiredToken => with_token(refused.expired.as_deref()).await,
            BadInput::ReadOnlyToken => with_token(refused.read_only.as_deref()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_documents_one_code() {
        let codes: Vec<Code> = BadInput::ALL.iter().map(|b| b.expected()).collect();
        assert!(codes.contains(&Code::NotFound));
        assert!(codes.contains(&Code::OutOfRange));
        assert!(codes.iter().all(|c| *c != Code::Ok));
    }

    #[test]
    fn credential_kinds_come_only_with_their_tokens() {
        assert_eq!(BadInput::kinds(&RefusedTokens::default()), BadInput::ALL);
        let all = BadInput::kinds(&RefusedTokens {
            missing: true,
            expired: Some("e".into()),
            read_only: Some("r".into()),
        });
        assert_eq!(all.len(), BadInput::ALL.len() + 3);
        assert_eq!(BadInput::ReadOnlyToken.expected(), Code::PermissionDenied);
        assert_eq!(BadInput::ExpiredToken.expected(), Code::Unauthenticated);
    }
}
