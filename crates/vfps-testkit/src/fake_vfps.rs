//! A trivial in-process vfps for the harness's own tests and benchmark: it
//! answers Create with a configurable behaviour and counts attempts. Not a
//! pseudonymization service: it stores nothing durable. A test double: it lives
//! here, in the test kit, and never ships in a release binary.
//!
//! [`Behaviour::Capacity`] gives it a known throughput ceiling (a fixed service
//! time on a few slots, calls queued in arrival order), so that a capacity
//! sweep has a knee to find.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::time::Instant;

use tonic::{Request, Response, Status};
use vfps_proto::v1::{
    self as pb,
    namespace_service_server::{NamespaceService, NamespaceServiceServer},
    pseudonym_service_server::{PseudonymService, PseudonymServiceServer},
};

/// How the fake answers `PseudonymService/Create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Remembers a pseudonym per original, answers at once.
    Healthy,
    /// Like `Healthy` after a delay.
    Slow(Duration),
    /// Always `INTERNAL`.
    Internal,
    /// Create and Get each occupy one of `slots` for `service_time`; calls
    /// wait for a slot in arrival order, without bound. Throughput ceiling:
    /// `slots / service_time` calls per second (10 ms × 2 slots = 200/s).
    Capacity { service_time: Duration, slots: u32 },
    /// Like `Capacity`, but the first `cold_calls` calls each wait
    /// `cold_time` more before their slot, all at once (a cold start:
    /// connections being opened, caches empty); later calls do not.
    ColdCapacity {
        service_time: Duration,
        slots: u32,
        cold_calls: u64,
        cold_time: Duration,
    },
}

/// The queue of [`Behaviour::Capacity`], kept in virtual time: each slot's
/// next free instant advances by exactly the service time per call, so the
/// ceiling is exact whatever the timer's granularity (a sleep that wakes
/// late delays one answer, not every later one).
struct Slots {
    service_time: Duration,
    free_at: Mutex<Vec<Instant>>,
    /// Calls served so far, and how many of the first ones wait how long more.
    served: AtomicU64,
    cold_calls: u64,
    cold_time: Duration,
}

impl Slots {
    fn new(service_time: Duration, slots: u32, cold_calls: u64, cold_time: Duration) -> Self {
        let now = Instant::now();
        Self {
            service_time,
            free_at: Mutex::new(vec![now; slots.max(1) as usize]),
            served: AtomicU64::new(0),
            cold_calls,
            cold_time,
        }
    }

    /// Waits until this call's service is over: on the slot that frees first,
    /// from when it frees (or now), after the cold start's wait if this is
    /// one of the first calls.
    async fn serve(&self) {
        if self.served.fetch_add(1, Ordering::Relaxed) < self.cold_calls {
            tokio::time::sleep(self.cold_time).await;
        }
        let done = {
            let mut free = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let Some(slot) = free.iter_mut().min() else {
                return;
            };
            let done = (*slot).max(now) + self.service_time;
            *slot = done;
            done
        };
        tokio::time::sleep_until(done).await;
    }
}

#[derive(Default)]
pub struct Counters {
    /// Create attempts received.
    pub creates: AtomicU64,
}

struct Fake {
    behaviour: Behaviour,
    counters: Arc<Counters>,
    mappings: Mutex<HashMap<String, String>>,
    /// The queue when the behaviour is [`Behaviour::Capacity`] or
    /// [`Behaviour::ColdCapacity`].
    slots: Option<Slots>,
}

/// A running fake; dropping the shutdown sender stops it.
pub struct FakeServer {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start(behaviour: Behaviour) -> std::io::Result<FakeServer> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let fake = Arc::new(Fake {
        behaviour,
        counters: counters.clone(),
        mappings: Mutex::new(HashMap::new()),
        slots: match behaviour {
            Behaviour::Capacity {
                service_time,
                slots,
            } => Some(Slots::new(service_time, slots, 0, Duration::ZERO)),
            Behaviour::ColdCapacity {
                service_time,
                slots,
                cold_calls,
                cold_time,
            } => Some(Slots::new(service_time, slots, cold_calls, cold_time)),
            _ => None,
        },
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PseudonymServiceServer::from_arc(fake.clone()))
            .add_service(NamespaceServiceServer::from_arc(fake))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = rx.await;
                },
            ),
    );
    Ok(FakeServer {
        addr,
        counters,
        _stop: tx,
    })
}

impl Fake {
    fn mapping(&self, original: &str) -> String {
        let mut m = self.mappings.lock().unwrap_or_else(|e| e.into_inner());
        let next = m.len();
        m.entry(original.to_owned())
            .or_insert_with(|| format!("fake-{next}"))
            .clone()
    }
}

#[tonic::async_trait]
impl PseudonymService for Fake {
    async fn create(
        &self,
        request: Request<pb::PseudonymServiceCreateRequest>,
    ) -> Result<Response<pb::PseudonymServiceCreateResponse>, Status> {
        self.counters.creates.fetch_add(1, Ordering::Relaxed);
        let r = request.into_inner();
        match self.behaviour {
            Behaviour::Internal => return Err(Status::internal("injected failure")),
            Behaviour::Slow(d) => tokio::time::sleep(d).await,
            Behaviour::Healthy | Behaviour::Capacity { .. } | Behaviour::ColdCapacity { .. } => {}
        }
        if let Some(slots) = &self.slots {
            slots.serve().await;
        }
        let pseudonym_value = self.mapping(&r.original_value);
        Ok(Response::new(pb::PseudonymServiceCreateResponse {
            pseudonym: Some(pb::Pseudonym {
                meta: None,
                namespace: r.namespace,
                original_value: Some(r.original_value),
                pseudonym_value,
            }),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::PseudonymServiceGetRequest>,
    ) -> Result<Response<pb::PseudonymServiceGetResponse>, Status> {
        let r = request.into_inner();
        if let Some(slots) = &self.slots {
            slots.serve().await;
        }
        let m = self.mappings.lock().unwrap_or_else(|e| e.into_inner());
        let original = m
            .iter()
            .find(|(_, p)| **p == r.pseudonym_value)
            .map(|(o, _)| o.clone());
        match original {
            Some(o) => Ok(Response::new(pb::PseudonymServiceGetResponse {
                pseudonym: Some(pb::Pseudonym {
                    meta: None,
                    namespace: r.namespace,
                    original_value: Some(o),
                    pseudonym_value: r.pseudonym_value,
                }),
            })),
            None => Err(Status::not_found("no such pseudonym")),
        }
    }

    async fn list(
        &self,
        _: Request<pb::PseudonymServiceListRequest>,
    ) -> Result<Response<pb::PseudonymServiceListResponse>, Status> {
        Err(Status::unimplemented("the fake does not list"))
    }

    async fn erase(
        &self,
        _: Request<pb::PseudonymServiceEraseRequest>,
    ) -> Result<Response<pb::PseudonymServiceEraseResponse>, Status> {
        Err(Status::unimplemented("the fake does not erase"))
    }
}

#[tonic::async_trait]
impl NamespaceService for Fake {
    async fn create(
        &self,
        request: Request<pb::NamespaceServiceCreateRequest>,
    ) -> Result<Response<pb::NamespaceServiceCreateResponse>, Status> {
        let r = request.into_inner();
        Ok(Response::new(pb::NamespaceServiceCreateResponse {
            namespace: Some(pb::Namespace {
                name: r.name,
                ..Default::default()
            }),
        }))
    }
    async fn get(
        &self,
        _: Request<pb::NamespaceServiceGetRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetResponse>, Status> {
        Err(Status::unimplemented("the fake has no namespaces"))
    }
    async fn get_all(
        &self,
        _: Request<pb::NamespaceServiceGetAllRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetAllResponse>, Status> {
        Ok(Response::new(pb::NamespaceServiceGetAllResponse {
            namespaces: vec![],
        }))
    }
    async fn delete(
        &self,
        _: Request<pb::NamespaceServiceDeleteRequest>,
    ) -> Result<Response<pb::NamespaceServiceDeleteResponse>, Status> {
        Err(Status::unimplemented("the fake has no namespaces"))
    }
}
