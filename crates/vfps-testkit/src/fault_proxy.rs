//! A gRPC proxy in front of a real vfps that injects one fault: every `n`-th
//! `PseudonymService/Create` is forwarded (so it takes effect) and then answered
//! `INTERNAL` — a server that fails innocent callers, for the harness to catch.
//! Everything else is forwarded untouched.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use tonic::{transport::Channel, Request, Response, Status};
use vfps_proto::v1::{
    self as pb,
    namespace_service_client::NamespaceServiceClient,
    namespace_service_server::{NamespaceService, NamespaceServiceServer},
    pseudonym_service_client::PseudonymServiceClient,
    pseudonym_service_server::{PseudonymService, PseudonymServiceServer},
};

struct Proxy {
    namespaces: NamespaceServiceClient<Channel>,
    pseudonyms: PseudonymServiceClient<Channel>,
    every: u64,
    creates: AtomicU64,
    injected: Arc<AtomicU64>,
}

/// A running proxy; dropping it stops it.
pub struct FaultProxy {
    pub addr: SocketAddr,
    /// Creates answered `INTERNAL` so far.
    pub injected: Arc<AtomicU64>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts a proxy to the vfps at `backend` (`http://host:port`) that answers
/// every `every`-th Create `INTERNAL` after forwarding it.
pub async fn start(backend: &str, every: u64) -> std::io::Result<FaultProxy> {
    let channel = Channel::from_shared(backend.to_owned())
        .map_err(std::io::Error::other)?
        .connect_lazy();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let injected = Arc::new(AtomicU64::new(0));
    let proxy = Arc::new(Proxy {
        namespaces: NamespaceServiceClient::new(channel.clone()),
        pseudonyms: PseudonymServiceClient::new(channel),
        every: every.max(1),
        creates: AtomicU64::new(0),
        injected: injected.clone(),
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PseudonymServiceServer::from_arc(proxy.clone()))
            .add_service(NamespaceServiceServer::from_arc(proxy))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = rx.await;
                },
            ),
    );
    Ok(FaultProxy {
        addr,
        injected,
        _stop: tx,
    })
}

#[tonic::async_trait]
impl PseudonymService for Proxy {
    async fn create(
        &self,
        request: Request<pb::PseudonymServiceCreateRequest>,
    ) -> Result<Response<pb::PseudonymServiceCreateResponse>, Status> {
        let answer = self.pseudonyms.clone().create(request.into_inner()).await;
        let n = self.creates.fetch_add(1, Ordering::Relaxed) + 1;
        if answer.is_ok() && n.is_multiple_of(self.every) {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(Status::internal("injected by the fault proxy"));
        }
        answer
    }

    async fn get(
        &self,
        request: Request<pb::PseudonymServiceGetRequest>,
    ) -> Result<Response<pb::PseudonymServiceGetResponse>, Status> {
        self.pseudonyms.clone().get(request.into_inner()).await
    }

    async fn list(
        &self,
        request: Request<pb::PseudonymServiceListRequest>,
    ) -> Result<Response<pb::PseudonymServiceListResponse>, Status> {
        self.pseudonyms.clone().list(request.into_inner()).await
    }

    async fn erase(
        &self,
        request: Request<pb::PseudonymServiceEraseRequest>,
    ) -> Result<Response<pb::PseudonymServiceEraseResponse>, Status> {
        self.pseudonyms.clone().erase(request.into_inner()).await
    }
}

#[tonic::async_trait]
impl NamespaceService for Proxy {
    async fn create(
        &self,
        request: Request<pb::NamespaceServiceCreateRequest>,
    ) -> Result<Response<pb::NamespaceServiceCreateResponse>, Status> {
        self.namespaces.clone().create(request.into_inner()).await
    }

    async fn get(
        &self,
        request: Request<pb::NamespaceServiceGetRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetResponse>, Status> {
        self.namespaces.clone().get(request.into_inner()).await
    }

    async fn get_all(
        &self,
        request: Request<pb::NamespaceServiceGetAllRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetAllResponse>, Status> {
        self.namespaces.clone().get_all(request.into_inner()).await
    }

    async fn delete(
        &self,
        request: Request<pb::NamespaceServiceDeleteRequest>,
    ) -> Result<Response<pb::NamespaceServiceDeleteResponse>, Status> {
        self.namespaces.clone().delete(request.into_inner()).await
    }
}
