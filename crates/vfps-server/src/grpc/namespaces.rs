//! `vfps.api.v1.NamespaceService`.

use tonic::{Request, Response, Status};
use vfps_core::Namespace;
use vfps_proto::v1::{self as pb, namespace_service_server::NamespaceService};

use super::{authorization, deadline, meta, observed};
use crate::{auth::Operation, service::NewNamespace, state::AppState};

pub struct NamespaceApi {
    pub state: AppState,
}

pub(crate) fn to_proto(ns: &Namespace) -> pb::Namespace {
    pb::Namespace {
        meta: meta(ns.created_at, ns.last_updated_at),
        name: ns.name.as_str().to_owned(),
        description: ns.description.clone(),
        pseudonym_generation_method: ns.settings.method.to_wire(),
        pseudonym_length: ns.settings.length,
        // Set, and empty when there is none, as upstream answers.
        pseudonym_prefix: Some(ns.settings.prefix.clone().unwrap_or_default()),
        pseudonym_suffix: Some(ns.settings.suffix.clone().unwrap_or_default()),
        pseudonym_deletion_allowed: ns.settings.deletable.then_some(true),
        multi_pseudonym: ns.settings.multi.then_some(true),
        original_system: ns.settings.original_system.clone(),
    }
}

pub(crate) fn new_namespace(r: pb::NamespaceServiceCreateRequest) -> NewNamespace {
    NewNamespace {
        name: r.name,
        method: r.pseudonym_generation_method,
        length: r.pseudonym_length,
        prefix: r.pseudonym_prefix.filter(|p| !p.is_empty()),
        suffix: r.pseudonym_suffix.filter(|s| !s.is_empty()),
        description: r.description,
        deletable: r.pseudonym_deletion_allowed.unwrap_or(false),
        multi: r.multi_pseudonym.unwrap_or(false),
        original_system: r.original_system.filter(|s| !s.is_empty()),
    }
}

#[tonic::async_trait]
impl NamespaceService for NamespaceApi {
    async fn create(
        &self,
        request: Request<pb::NamespaceServiceCreateRequest>,
    ) -> Result<Response<pb::NamespaceServiceCreateResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        let req = new_namespace(req);
        let reveals = vfps_core::GenerationMethod::from_wire(req.method).and_then(|m| m.reveals());
        let created = observed(&self.state, "NamespaceService/Create", async {
            self.state
                .auth
                .check(
                    authorization(&metadata),
                    Operation::CreateNamespace,
                    Some(&req.name),
                    d,
                )
                .await?;
            let ns = self.state.service.create_namespace(req, d).await?;
            Ok(pb::NamespaceServiceCreateResponse {
                namespace: Some(to_proto(&ns)),
            })
        })
        .await;
        // What the method reveals, beside the answer (docs/privacy.md).
        created.map(|mut r| {
            if let Some(text) = reveals.and_then(|t| t.parse().ok()) {
                r.metadata_mut().insert("vfps-warning", text);
            }
            r
        })
    }

    async fn get(
        &self,
        request: Request<pb::NamespaceServiceGetRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "NamespaceService/Get", async {
            self.state
                .auth
                .check(
                    authorization(&metadata),
                    Operation::GetNamespace,
                    Some(&req.name),
                    d,
                )
                .await?;
            let ns = self.state.service.get_namespace(&req.name, d).await?;
            Ok(pb::NamespaceServiceGetResponse {
                namespace: Some(to_proto(&ns)),
            })
        })
        .await
    }

    async fn get_all(
        &self,
        request: Request<pb::NamespaceServiceGetAllRequest>,
    ) -> Result<Response<pb::NamespaceServiceGetAllResponse>, Status> {
        let d = deadline(&self.state, &request);
        let metadata = request.metadata();
        observed(&self.state, "NamespaceService/GetAll", async {
            let auth = &self.state.auth;
            let who = auth
                .check(authorization(metadata), Operation::ListNamespaces, None, d)
                .await?;
            let all = self.state.service.list_namespaces(d).await?;
            Ok(pb::NamespaceServiceGetAllResponse {
                namespaces: all
                    .iter()
                    .filter(|ns| auth.may_see(&who, ns.name.as_str()))
                    .map(to_proto)
                    .collect(),
            })
        })
        .await
    }

    async fn delete(
        &self,
        request: Request<pb::NamespaceServiceDeleteRequest>,
    ) -> Result<Response<pb::NamespaceServiceDeleteResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        let call = async {
            self.state
                .delete_namespace(authorization(&metadata), &req.name, d)
                .await?;
            Ok(pb::NamespaceServiceDeleteResponse {})
        };
        observed(&self.state, "NamespaceService/Delete", call).await
    }
}
