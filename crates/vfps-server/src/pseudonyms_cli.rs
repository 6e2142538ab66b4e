//! `vfps pseudonyms …`: a client of `PseudonymService` for what an operator
//! does by hand. `erase` reads the original from standard input, so that it
//! is in no command line, shell history or process list.

use std::io::Read;

use anyhow::{bail, Context};
use clap::Subcommand;
use vfps_proto::v1::{self as pb, pseudonym_service_client::PseudonymServiceClient};

use crate::jobs_cli::Connection;

/// Longest original read from standard input (the service's limit, and a
/// line break).
const MAX_INPUT_BYTES: u64 = vfps_core::MAX_ORIGINAL_VALUE_BYTES as u64 + 2;

#[derive(Subcommand, Debug)]
pub enum PseudonymsAction {
    /// Erase an original's entry (needs the erase right): anonymize it for
    /// good (the default), or delete it where the namespace allows that.
    /// The original is read from standard input (one line).
    Erase {
        #[arg(long)]
        namespace: String,
        /// Delete the entry instead of anonymizing it.
        #[arg(long)]
        delete: bool,
        #[command(flatten)]
        connection: Connection,
    },
}

pub async fn run(action: PseudonymsAction) -> anyhow::Result<()> {
    match action {
        PseudonymsAction::Erase {
            namespace,
            delete,
            connection,
        } => {
            let original = read_original(std::io::stdin().lock())?;
            let mode = if delete {
                pb::ErasureMode::Delete
            } else {
                pb::ErasureMode::Anonymize
            };
            let mut client = PseudonymServiceClient::new(connection.channel().await?);
            client
                .erase(connection.request(pb::PseudonymServiceEraseRequest {
                    namespace: namespace.clone(),
                    original_value: original,
                    mode: mode as i32,
                })?)
                .await
                .map_err(|s| anyhow::anyhow!("{:?}: {}", s.code(), s.message()))?;
            let done = if delete { "deleted" } else { "anonymized" };
            eprintln!("vfps pseudonyms: the entry in namespace {namespace} is {done}");
            Ok(())
        }
    }
}

/// The original on standard input: one line, its line break dropped.
fn read_original(input: impl Read) -> anyhow::Result<String> {
    let mut text = String::new();
    input
        .take(MAX_INPUT_BYTES + 1)
        .read_to_string(&mut text)
        .context("standard input is not UTF-8 text")?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        bail!("standard input is longer than an original may be ({MAX_INPUT_BYTES} bytes)");
    }
    let line = text.strip_suffix('\n').unwrap_or(&text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.contains('\n') {
        bail!("standard input holds more than one line: give one original");
    }
    if line.trim().is_empty() {
        bail!("no original on standard input");
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_original_is_read_from_standard_input() {
        assert_eq!(read_original(&b"patient 7\n"[..]).unwrap(), "patient 7");
        assert_eq!(read_original(&b"  spaced  \r\n"[..]).unwrap(), "  spaced  ");
        for bad in [&b""[..], b"\n", b"a\nb\n"] {
            assert!(read_original(bad).is_err(), "{bad:?}");
        }
        let long = vec![b'x'; 5000];
        let e = read_original(&long[..]).unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
    }
}
