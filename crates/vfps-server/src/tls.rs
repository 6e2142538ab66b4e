//! TLS on the service's own ports (rustls): the certificate and key come from
//! PEM files and are re-read when the files change (cert-manager rotates them
//! in place), without a restart and without touching established
//! connections: a new handshake gets the new certificate. With a client CA
//! bundle, clients must present a certificate it signed (mTLS); the bundle is
//! re-read the same way. A change is a change of the files' contents (not of
//! their times, which a copy may keep).
//!
//! Handshakes run in their own tasks, bounded in time, so a slow or silent
//! client never holds up the accept loop; finished connections are handed to
//! the gRPC and HTTP servers through [`Incoming`].

use std::{
    fmt,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, RwLock},
    task::{Context, Poll},
    time::Duration,
};

use anyhow::Context as _;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{danger::ClientCertVerifier, ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
    RootCertStore, ServerConfig,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use crate::config::Tls;

mod expiry;

/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most finished handshakes waiting to be served.
const BACKLOG: usize = 256;

/// The current certificate, swapped when the files change.
struct Reloading {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<u64>)>,
    /// The current certificate's end of validity, and its standing as last
    /// logged (said again when it changes: expiring soon, then expired).
    expiry: std::sync::Mutex<(Option<std::time::SystemTime>, Option<expiry::Standing>)>,
}

impl fmt::Debug for Reloading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloading")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.0.clone())
    }
}

/// A digest of the files' contents (`None` if one cannot be read): what tells
/// a rotation, whatever the files' times say.
fn contents(paths: &[&Path]) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in paths {
        std::fs::read(p).ok()?.hash(&mut h);
    }
    Some(h.finish())
}

/// Reads a certificate chain and its key; errors name the file.
fn load(cert_file: &Path, key_file: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .with_context(|| format!("cannot read VFPS_TLS_CERT_FILE {}", cert_file.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("VFPS_TLS_CERT_FILE {} is not PEM", cert_file.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "VFPS_TLS_CERT_FILE {} holds no certificate",
            cert_file.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key_file).with_context(|| {
        format!(
            "VFPS_TLS_KEY_FILE {} holds no private key",
            key_file.display()
        )
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| {
            format!(
                "VFPS_TLS_KEY_FILE {} is not a usable key",
                key_file.display()
            )
        })?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().with_context(|| {
        format!(
            "VFPS_TLS_KEY_FILE {} does not belong to VFPS_TLS_CERT_FILE {}",
            key_file.display(),
            cert_file.display()
        )
    })?;
    Ok(Arc::new(certified))
}

impl Reloading {
    /// Warns when the certificate expires within [`expiry::SOON`] or has
    /// expired, once per change of its standing.
    fn check_expiry(&self) {
        let Ok(mut e) = self.expiry.lock() else {
            return;
        };
        let (not_after, said) = *e;
        let now = std::time::SystemTime::now();
        let standing = expiry::Standing::of(not_after, now);
        if said == Some(standing) {
            return;
        }
        e.1 = Some(standing);
        let file = self.cert_file.display();
        match (standing, not_after) {
            (expiry::Standing::Expired, Some(t)) => tracing::error!(
                cert_file = %file,
                "the TLS certificate {}: clients will refuse it; replace the file",
                expiry::describe(t, now)
            ),
            (expiry::Standing::ExpiresSoon, Some(t)) => tracing::warn!(
                cert_file = %file,
                "the TLS certificate {}: replace the file before then",
                expiry::describe(t, now)
            ),
            (expiry::Standing::Unknown, _) => tracing::warn!(
                cert_file = %file,
                "cannot read when the TLS certificate expires"
            ),
            _ => {}
        }
    }

    /// Re-reads the files if either changed; a broken pair (half-written
    /// during a rotation) keeps the old certificate and is tried again later.
    fn refresh(&self) {
        let stamp = contents(&[&self.cert_file, &self.key_file]);
        if self.current.read().is_ok_and(|c| c.1 == stamp) {
            return;
        }
        match load(&self.cert_file, &self.key_file) {
            Ok(key) => {
                let not_after = key
                    .end_entity_cert()
                    .ok()
                    .and_then(|c| expiry::not_after(c));
                if let Ok(mut c) = self.current.write() {
                    *c = (key, stamp);
                }
                tracing::info!(cert_file = %self.cert_file.display(), "TLS certificate reloaded");
                if let Ok(mut e) = self.expiry.lock() {
                    *e = (not_after, None);
                }
                self.check_expiry();
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "TLS certificate not reloaded; keeping the current one")
            }
        }
    }
}

/// The client CA bundle's verifier; errors name the file.
fn client_verifier(
    ca: &Path,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> anyhow::Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("cannot read VFPS_TLS_CLIENT_CA_FILE {}", ca.display()))?
    {
        let c =
            c.with_context(|| format!("VFPS_TLS_CLIENT_CA_FILE {} is not PEM", ca.display()))?;
        roots.add(c).with_context(|| {
            format!(
                "VFPS_TLS_CLIENT_CA_FILE {} holds a bad certificate",
                ca.display()
            )
        })?;
    }
    if roots.is_empty() {
        anyhow::bail!(
            "VFPS_TLS_CLIENT_CA_FILE {} holds no certificate",
            ca.display()
        );
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .context("cannot verify clients with VFPS_TLS_CLIENT_CA_FILE")
}

/// The client CA bundle as last read, and its digest.
struct ClientCa {
    file: PathBuf,
    stamp: std::sync::Mutex<Option<u64>>,
}

/// The TLS settings of the API ports, ready to accept with.
#[derive(Clone)]
pub struct Acceptor {
    /// Swapped when the client CA bundle changes; each handshake takes the
    /// current one.
    config: Arc<RwLock<Arc<ServerConfig>>>,
    certs: Arc<Reloading>,
    client_ca: Option<Arc<ClientCa>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl Acceptor {
    /// Loads the certificate (and the client CA bundle, if any); fails naming
    /// the file at fault.
    pub fn new(tls: &Tls) -> anyhow::Result<Self> {
        let (cert_file, key_file) = (tls.cert_file.clone(), tls.key_file.clone());
        // Digests before the reads: a file replaced in between is read again
        // at the next check instead of being taken as already loaded.
        let stamp = contents(&[&cert_file, &key_file]);
        let key = load(&cert_file, &key_file)?;
        let not_after = key
            .end_entity_cert()
            .ok()
            .and_then(|c| expiry::not_after(c));
        let certs = Arc::new(Reloading {
            cert_file,
            key_file,
            current: RwLock::new((key, stamp)),
            expiry: std::sync::Mutex::new((not_after, None)),
        });
        certs.check_expiry();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_stamp = tls.client_ca_file.as_ref().map(|f| contents(&[f]));
        let verifier = tls
            .client_ca_file
            .as_deref()
            .map(|ca| client_verifier(ca, &provider))
            .transpose()?;
        let client_ca = tls.client_ca_file.as_ref().map(|file| {
            Arc::new(ClientCa {
                stamp: std::sync::Mutex::new(ca_stamp.flatten()),
                file: file.clone(),
            })
        });
        let config = Self::config(&provider, &certs, verifier)?;
        Ok(Self {
            config: Arc::new(RwLock::new(config)),
            certs,
            client_ca,
            provider,
        })
    }

    fn config(
        provider: &Arc<rustls::crypto::CryptoProvider>,
        certs: &Arc<Reloading>,
        verifier: Option<Arc<dyn ClientCertVerifier>>,
    ) -> anyhow::Result<Arc<ServerConfig>> {
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("no TLS protocol version available")?;
        let builder = match verifier {
            None => builder.with_no_client_auth(),
            Some(v) => builder.with_client_cert_verifier(v),
        };
        let mut config = builder.with_cert_resolver(certs.clone());
        // gRPC needs HTTP/2; REST and FHIR clients may use either.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Re-reads the client CA bundle if its contents changed; a broken one
    /// keeps the current bundle.
    fn refresh_client_ca(&self) {
        let Some(ca) = &self.client_ca else { return };
        let stamp = contents(&[&ca.file]);
        let Ok(mut last) = ca.stamp.lock() else {
            return;
        };
        if *last == stamp {
            return;
        }
        let rebuilt = client_verifier(&ca.file, &self.provider)
            .and_then(|v| Self::config(&self.provider, &self.certs, Some(v)));
        match rebuilt {
            Ok(config) => {
                if let Ok(mut c) = self.config.write() {
                    *c = config;
                }
                *last = stamp;
                tracing::info!(client_ca_file = %ca.file.display(), "TLS client CA bundle reloaded");
            }
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "TLS client CA bundle not reloaded; keeping the current one"
            ),
        }
    }

    /// Re-reads changed certificate and client CA files every `interval`
    /// until `stop`.
    pub async fn watch(self, interval: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            let this = self.clone();
            let _ = tokio::task::spawn_blocking(move || {
                this.certs.refresh();
                this.certs.check_expiry();
                this.refresh_client_ca();
            })
            .await;
        }
    }

    /// Accepts on `listener` until `stop`, handshaking each connection in its
    /// own task; the finished ones come out of the returned [`Incoming`].
    pub fn incoming(&self, listener: TcpListener, stop: CancellationToken) -> Incoming {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let config = self.config.clone();
        let local = listener.local_addr().ok();
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    _ = stop.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let _ = tcp.set_nodelay(true);
                let Ok(current) = config.read().map(|c| c.clone()) else {
                    continue;
                };
                let acceptor = tokio_rustls::TlsAcceptor::from(current);
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx
                                .send(TlsConnection {
                                    stream: Box::new(stream),
                                    peer,
                                })
                                .await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Incoming { rx, local }
    }
}

/// A connection whose TLS handshake is done.
pub struct TlsConnection {
    stream: Box<tokio_rustls::server::TlsStream<TcpStream>>,
    peer: std::net::SocketAddr,
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: self.stream.get_ref().0.local_addr().ok(),
            remote_addr: Some(self.peer),
        }
    }
}

/// Finished TLS connections, for tonic (a `Stream`) and axum (a `Listener`).
pub struct Incoming {
    rx: mpsc::Receiver<TlsConnection>,
    local: Option<std::net::SocketAddr>,
}

impl futures::Stream for Incoming {
    type Item = Result<TlsConnection, std::io::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

impl axum::serve::Listener for Incoming {
    type Io = TlsConnection;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => {
                let peer = c.peer;
                (c, peer)
            }
            // The accept loop stopped (shutdown): nothing will come any more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| std::io::Error::other("the listener has no local address"))
    }
}
