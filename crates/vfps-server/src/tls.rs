//! TLS on the service's own ports (rustls): the certificate and key come from
//! PEM files and are re-read when the files change (cert-manager rotates them
//! in place), without a restart and without touching established
//! connections: a new handshake gets the new certificate. With a client CA
//! bundle, clients must present a certificate it signed (mTLS).
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
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
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

/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most finished handshakes waiting to be served.
const BACKLOG: usize = 256;

/// The current certificate, swapped when the files change.
struct Reloading {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<SystemTime>)>,
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

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
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
    certified
        .keys_match()
        .context("VFPS_TLS_KEY_FILE does not belong to VFPS_TLS_CERT_FILE")?;
    Ok(Arc::new(certified))
}

impl Reloading {
    /// Re-reads the files if either changed; a broken pair (half-written
    /// during a rotation) keeps the old certificate and is tried again later.
    fn refresh(&self) {
        let stamp = modified(&self.cert_file).max(modified(&self.key_file));
        if self.current.read().is_ok_and(|c| c.1 == stamp) {
            return;
        }
        match load(&self.cert_file, &self.key_file) {
            Ok(key) => {
                if let Ok(mut c) = self.current.write() {
                    *c = (key, stamp);
                }
                tracing::info!(cert_file = %self.cert_file.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "TLS certificate not reloaded; keeping the current one")
            }
        }
    }
}

/// The TLS settings of the API ports, ready to accept with.
#[derive(Clone)]
pub struct Acceptor {
    config: Arc<ServerConfig>,
    certs: Arc<Reloading>,
}

impl Acceptor {
    /// Loads the certificate (and the client CA bundle, if any); fails naming
    /// the file at fault.
    pub fn new(tls: &Tls) -> anyhow::Result<Self> {
        let (cert_file, key_file) = (tls.cert_file.clone(), tls.key_file.clone());
        let key = load(&cert_file, &key_file)?;
        let stamp = modified(&cert_file).max(modified(&key_file));
        let certs = Arc::new(Reloading {
            cert_file,
            key_file,
            current: RwLock::new((key, stamp)),
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("no TLS protocol version available")?;
        let builder = match &tls.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca).with_context(|| {
                    format!("cannot read VFPS_TLS_CLIENT_CA_FILE {}", ca.display())
                })? {
                    let c = c.with_context(|| {
                        format!("VFPS_TLS_CLIENT_CA_FILE {} is not PEM", ca.display())
                    })?;
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
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .context("cannot verify clients with VFPS_TLS_CLIENT_CA_FILE")?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(certs.clone());
        // gRPC needs HTTP/2; REST and FHIR clients may use either.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            certs,
        })
    }

    /// Re-reads changed certificate files every `interval` until `stop`.
    pub async fn watch(self, interval: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            let certs = self.certs.clone();
            let _ = tokio::task::spawn_blocking(move || certs.refresh()).await;
        }
    }

    /// Accepts on `listener` until `stop`, handshaking each connection in its
    /// own task; the finished ones come out of the returned [`Incoming`].
    pub fn incoming(&self, listener: TcpListener, stop: CancellationToken) -> Incoming {
        let (tx, rx) = mpsc::channel(BACKLOG);
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
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
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
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
