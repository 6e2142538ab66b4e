//! The mix: which operation each slot of the open-model schedule carries.
//!
//! `RESILIENCE_MIX` weights the operations (`create=60,recreate=15,…`; an
//! operation left out has weight 0). The slots are dealt by smooth weighted
//! round-robin, so each operation gets its share evenly spread over every second
//! rather than in bursts — at the default mix and 50 calls/s every operation
//! occurs every second.

use serde::{Deserialize, Serialize};

pub use crate::operation::Operation;

/// Weights of the operations, in [`Operation::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix(pub [u32; Operation::COUNT]);

/// The default mix: at 50 calls/s every operation occurs at least once a second.
pub const DEFAULT_MIX: &str = "create=60,recreate=14,get=14,list=4,churn=6,bad=2";

/// The MII side the platforms' runs add to their mix (P8): the local
/// platform's script and the kind Job alike.
pub const PLATFORM_MII: &str = "mii=4,bundle=1,erase=2";

/// `raw` with [`PLATFORM_MII`] added when it weighs none of the MII
/// operations, so that every platform run proves erasure and Bundles; a mix
/// that has any of them, or does not parse (its error is told where it is
/// read), is left as it is.
pub fn with_platform_mii(raw: &str) -> String {
    match Mix::parse(raw) {
        Ok(mix)
            if [Operation::Mii, Operation::Bundle, Operation::Erase]
                .into_iter()
                .all(|op| mix.weight(op) == 0) =>
        {
            format!("{},{PLATFORM_MII}", raw.trim().trim_end_matches(','))
        }
        _ => raw.to_owned(),
    }
}

/// A mix that cannot be used, naming the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("RESILIENCE_MIX={raw:?}: {why}")]
pub struct MixError {
    raw: String,
    why: String,
}

impl Mix {
    pub fn parse(raw: &str) -> Result<Self, MixError> {
        let err = |why: String| MixError {
            raw: raw.to_owned(),
            why,
        };
        let mut weights = [0u32; Operation::COUNT];
        let mut seen = [false; Operation::COUNT];
        for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| err(format!("{part:?} is not operation=weight")))?;
            let op = Operation::parse(name.trim()).ok_or_else(|| {
                err(format!(
                    "unknown operation {:?} (known: {})",
                    name.trim(),
                    Operation::ALL.map(Operation::name).join(", ")
                ))
            })?;
            if seen[op.index()] {
                return Err(err(format!("{} is given twice", op.name())));
            }
            seen[op.index()] = true;
            weights[op.index()] = weight
                .trim()
                .parse()
                .map_err(|_| err(format!("weight {weight:?} is not a whole number")))?;
        }
        if weights[Operation::Create.index()] == 0 {
            return Err(err(
                "create must have a weight: every other operation reads what creates wrote".into(),
            ));
        }
        Ok(Self(weights))
    }

    pub fn weight(&self, op: Operation) -> u32 {
        self.0[op.index()]
    }

    /// The operations with a weight.
    pub fn operations(&self) -> impl Iterator<Item = Operation> + '_ {
        Operation::ALL.into_iter().filter(|o| self.weight(*o) > 0)
    }

    /// The endless sequence of operations, by smooth weighted round-robin.
    pub fn dealer(&self) -> Dealer {
        Dealer {
            weights: self.0,
            current: [0; Operation::COUNT],
        }
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .operations()
            .map(|o| format!("{}={}", o.name(), self.weight(o)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Deals operations in proportion to their weights, evenly spread.
pub struct Dealer {
    weights: [u32; Operation::COUNT],
    current: [i64; Operation::COUNT],
}

impl Iterator for Dealer {
    type Item = Operation;

    fn next(&mut self) -> Option<Operation> {
        let total: i64 = self.weights.iter().map(|w| i64::from(*w)).sum();
        for (c, w) in self.current.iter_mut().zip(self.weights) {
            *c += i64::from(w);
        }
        let (best, _) = self
            .current
            .iter()
            .enumerate()
            .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))?;
        self.current[best] -= total;
        Some(Operation::ALL[best])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_mix_has_every_operation_every_second_at_50_per_second() {
        let mix = Mix::parse(DEFAULT_MIX).unwrap();
        let mut dealer = mix.dealer();
        for second in 0..10 {
            let ops: Vec<Operation> = dealer.by_ref().take(50).collect();
            // The MII interface's operations need a namespace that allows
            // erasure and the erase right: the platforms add them.
            for op in &Operation::ALL[..Operation::BEFORE_MII] {
                assert!(ops.contains(op), "{op:?} missing in second {second}");
            }
        }
    }

    #[test]
    fn a_platform_mix_without_the_mii_side_gets_it_and_one_with_it_is_kept() {
        let added = with_platform_mii(DEFAULT_MIX);
        assert_eq!(added, format!("{DEFAULT_MIX},{PLATFORM_MII}"));
        let mix = Mix::parse(&added).unwrap();
        assert_eq!(mix.weight(Operation::Mii), 4);
        assert_eq!(mix.weight(Operation::Bundle), 1);
        assert_eq!(mix.weight(Operation::Erase), 2);
        assert_eq!(with_platform_mii("create=1,bundle=3"), "create=1,bundle=3");
        assert_eq!(with_platform_mii("create=abc"), "create=abc");
    }

    #[test]
    fn operations_get_their_share_and_create_alone_is_the_upstream_workload() {
        let mix = Mix::parse("create=3,get=1").unwrap();
        let ops: Vec<Operation> = mix.dealer().take(400).collect();
        let creates = ops.iter().filter(|o| **o == Operation::Create).count();
        assert_eq!(creates, 300);
        assert!(!ops.contains(&Operation::Churn));
        let upstream = Mix::parse("create=100").unwrap();
        assert!(upstream.dealer().take(50).all(|o| o == Operation::Create));
        assert_eq!(upstream.to_string(), "create=100");
    }

    #[test]
    fn a_bad_mix_names_its_fault() {
        for (raw, needle) in [
            ("create=1,explode=2", "explode"),
            ("create", "operation=weight"),
            ("create=x", "\"x\""),
            ("get=5", "create must have a weight"),
            ("create=1,create=2", "twice"),
        ] {
            let e = Mix::parse(raw).unwrap_err().to_string();
            assert!(e.contains(needle), "{raw}: {e}");
        }
    }
}
