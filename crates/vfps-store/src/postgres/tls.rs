//! TLS to PostgreSQL with Npgsql's `SSL Mode`s, on rustls.
//!
//! | SSL Mode | encryption | the server's certificate |
//! |---|---|---|
//! | `Disable` | never | — |
//! | `Allow`, `Prefer` (default) | when the server offers it | not verified |
//! | `Require` | always | not verified (as libpq and Npgsql 8) |
//! | `VerifyCA` | always | chain verified against the roots |
//! | `VerifyFull` | always | chain and host name verified |
//!
//! The roots are `Root Certificate` (a PEM file), else the system bundle
//! (`SSL_CERT_FILE`, else `/etc/ssl/certs/ca-certificates.crt`).
//! `Trust Server Certificate=true` skips verification in every mode.

use std::{path::PathBuf, sync::Arc};

use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        WebPkiServerVerifier,
    },
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime},
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// Npgsql's names (case and dashes do not matter).
    pub fn parse(value: &str) -> Option<SslMode> {
        Some(
            match value.trim().to_ascii_lowercase().replace('-', "").as_str() {
                "disable" => SslMode::Disable,
                "allow" | "prefer" => SslMode::Prefer,
                "require" => SslMode::Require,
                "verifyca" => SslMode::VerifyCa,
                "verifyfull" => SslMode::VerifyFull,
                _ => return None,
            },
        )
    }

    pub fn postgres(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// The TLS settings of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslOptions {
    pub mode: SslMode,
    pub root_certificate: Option<PathBuf>,
    pub trust_server_certificate: bool,
}

impl Default for SslOptions {
    fn default() -> Self {
        Self {
            mode: SslMode::Prefer,
            root_certificate: None,
            trust_server_certificate: false,
        }
    }
}

const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn roots(o: &SslOptions) -> Result<RootCertStore, String> {
    let path = o
        .root_certificate
        .clone()
        .or_else(|| std::env::var_os("SSL_CERT_FILE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(SYSTEM_BUNDLE));
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| format!("Root Certificate {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("Root Certificate {}: {e}", path.display()))?;
        store
            .add(cert)
            .map_err(|e| format!("Root Certificate {}: {e}", path.display()))?;
    }
    if store.is_empty() {
        return Err(format!(
            "Root Certificate {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(store)
}

/// The connector for these settings; an unreadable root file is an error here,
/// at start-up, not at the first connection.
pub fn connector(o: &SslOptions) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verify =
        !o.trust_server_certificate && matches!(o.mode, SslMode::VerifyCa | SslMode::VerifyFull);
    let chain = if verify {
        Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(o)?), provider.clone())
                .build()
                .map_err(|e| format!("cannot build the certificate verifier: {e}"))?,
        )
    } else {
        None
    };
    let verifier = Verifier {
        chain,
        check_name: o.mode == SslMode::VerifyFull,
        provider: provider.clone(),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The server's certificate: not verified (`Prefer`, `Require`), its chain only
/// (`VerifyCA`), or chain and name (`VerifyFull`). The handshake signature is
/// always verified (the server holds the key of the certificate it sent).
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The name is checked only after the chain verified.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npgsql_mode_names_parse() {
        assert_eq!(SslMode::parse("VerifyFull"), Some(SslMode::VerifyFull));
        assert_eq!(SslMode::parse("verify-ca"), Some(SslMode::VerifyCa));
        assert_eq!(SslMode::parse("Allow"), Some(SslMode::Prefer));
        assert_eq!(SslMode::parse("REQUIRE"), Some(SslMode::Require));
        assert_eq!(SslMode::parse("sometimes"), None);
    }

    #[test]
    fn a_missing_or_empty_root_file_is_an_error_naming_it() {
        let o = SslOptions {
            mode: SslMode::VerifyFull,
            root_certificate: Some("/nonexistent/ca.pem".into()),
            trust_server_certificate: false,
        };
        let e = connector(&o).err().unwrap();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let empty = std::env::temp_dir().join(format!("vfps-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = connector(&SslOptions {
            root_certificate: Some(empty.clone()),
            ..o.clone()
        })
        .err()
        .unwrap();
        assert!(e.contains("no certificate"), "{e}");
        let _ = std::fs::remove_file(empty);
        // Without verification the roots are not needed.
        assert!(connector(&SslOptions {
            mode: SslMode::Require,
            ..o
        })
        .is_ok());
    }
}
