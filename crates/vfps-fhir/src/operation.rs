//! The six operations of the MII pseudonymization interface (IG
//! 2026.1.0-ballot.1), as a type: their codes, definitions and parameters.

use crate::parameters::Param;

/// The IG's canonical base.
pub const IG: &str =
    "https://www.medizininformatik-initiative.de/fhir/ext/mii-interface-module-pseudonymization";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Pseudonymize,
    GetPseudonym,
    DePseudonymize,
    PseudonymizeMultiple,
    DeletePseudonym,
    AnonymizeOriginal,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Self::Pseudonymize,
        Self::GetPseudonym,
        Self::DePseudonymize,
        Self::PseudonymizeMultiple,
        Self::DeletePseudonym,
        Self::AnonymizeOriginal,
    ];

    /// The operation's code (without `$`).
    pub fn code(self) -> &'static str {
        match self {
            Self::Pseudonymize => "pseudonymize",
            Self::GetPseudonym => "get-pseudonym",
            Self::DePseudonymize => "de-pseudonymize",
            Self::PseudonymizeMultiple => "pseudonymize-multiple",
            Self::DeletePseudonym => "delete-pseudonym",
            Self::AnonymizeOriginal => "anonymize-original",
        }
    }

    /// The IG's OperationDefinition.
    pub fn definition(self) -> String {
        let id = match self {
            Self::Pseudonymize => "Pseudonymize",
            Self::GetPseudonym => "GetPseudonym",
            Self::DePseudonymize => "DePseudonymize",
            Self::PseudonymizeMultiple => "PseudonymizeMultiple",
            Self::DeletePseudonym => "DeletePseudonym",
            Self::AnonymizeOriginal => "AnonymizeOriginal",
        };
        format!("{IG}/OperationDefinition/{id}")
    }

    /// The operation an entry's URL (`$pseudonymize`, `/$pseudonymize`,
    /// `pseudonymize`) names.
    pub fn from_url(url: &str) -> Option<Self> {
        let code = url.trim_start_matches('/').trim_start_matches('$');
        Self::ALL.into_iter().find(|op| op.code() == code)
    }

    /// The parameters it takes besides `context`: required, optional.
    pub fn params(self) -> (&'static [Param], &'static [Param]) {
        match self {
            Self::Pseudonymize => (&[Param::Original], &[Param::AllowCreate]),
            Self::GetPseudonym | Self::DeletePseudonym | Self::AnonymizeOriginal => {
                (&[Param::Original], &[])
            }
            Self::DePseudonymize => (&[Param::Pseudonym], &[]),
            Self::PseudonymizeMultiple => (&[Param::Original, Param::Count], &[]),
        }
    }
}
