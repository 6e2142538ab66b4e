//! `vfps.api.v1.PseudonymService`.

use tonic::{Request, Response, Status};
use vfps_core::{Pseudonym, PseudonymPage};
use vfps_proto::v1::{self as pb, pseudonym_service_server::PseudonymService};

use super::{authorization, deadline, meta, observed};
use crate::{auth::Operation, state::AppState};

pub struct PseudonymApi {
    pub state: AppState,
}

/// `with_original`: Create and Get carry the original value; List items never do.
pub(crate) fn to_proto(p: Pseudonym, with_original: bool) -> pb::Pseudonym {
    pb::Pseudonym {
        // The day, not the microsecond (docs/privacy.md).
        meta: meta(
            vfps_core::shown_time(p.created_at),
            vfps_core::shown_time(p.last_updated_at),
        ),
        namespace: p.namespace.as_str().to_owned(),
        original_value: with_original.then_some(p.original_value),
        pseudonym_value: p.pseudonym_value,
    }
}

pub(crate) fn list_response(
    namespace: String,
    page: PseudonymPage,
) -> pb::PseudonymServiceListResponse {
    pb::PseudonymServiceListResponse {
        namespace,
        total_size: page.total_size,
        next_page_token: page.next.map(|c| c.encode()).unwrap_or_default(),
        pseudonyms: page.items.into_iter().map(|p| to_proto(p, false)).collect(),
    }
}

#[tonic::async_trait]
impl PseudonymService for PseudonymApi {
    async fn create(
        &self,
        request: Request<pb::PseudonymServiceCreateRequest>,
    ) -> Result<Response<pb::PseudonymServiceCreateResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        observed(&self.state, "PseudonymService/Create", async {
            self.state
                .auth
                .check(
                    authorization(&metadata),
                    Operation::CreatePseudonym,
                    Some(&req.namespace),
                    d,
                )
                .await?;
            let p = self
                .state
                .service
                .create_pseudonym(&req.namespace, &req.original_value, d)
                .await?;
            Ok(pb::PseudonymServiceCreateResponse {
                pseudonym: Some(to_proto(p, true)),
            })
        })
        .await
    }

    async fn get(
        &self,
        request: Request<pb::PseudonymServiceGetRequest>,
    ) -> Result<Response<pb::PseudonymServiceGetResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        let call = async {
            let p = self
                .state
                .service
                .get_pseudonym(&req.namespace, &req.pseudonym_value, d)
                .await?;
            Ok(pb::PseudonymServiceGetResponse {
                pseudonym: Some(to_proto(p, true)),
            })
        };
        let audited = self.state.auth.audited(
            authorization(&metadata),
            Operation::GetPseudonym,
            &req.namespace,
            d,
            call,
            |_| 1,
        );
        observed(&self.state, "PseudonymService/Get", audited).await
    }

    async fn erase(
        &self,
        request: Request<pb::PseudonymServiceEraseRequest>,
    ) -> Result<Response<pb::PseudonymServiceEraseResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        let call = async {
            let how = erasure_mode(req.mode)?;
            self.state
                .service
                .erase(&req.namespace, &req.original_value, how, d)
                .await?;
            Ok(pb::PseudonymServiceEraseResponse {})
        };
        let audited = self.state.auth.audited(
            authorization(&metadata),
            Operation::ErasePseudonym,
            &req.namespace,
            d,
            call,
            |_| 1,
        );
        observed(&self.state, "PseudonymService/Erase", audited).await
    }

    async fn list(
        &self,
        request: Request<pb::PseudonymServiceListRequest>,
    ) -> Result<Response<pb::PseudonymServiceListResponse>, Status> {
        let d = deadline(&self.state, &request);
        let (metadata, _, req) = request.into_parts();
        let call = async {
            let page = self
                .state
                .service
                .list_pseudonyms(
                    &req.namespace,
                    req.page_size,
                    &req.page_token,
                    req.include_total_size,
                    d,
                )
                .await?;
            Ok(list_response(req.namespace.clone(), page))
        };
        let audited = self.state.auth.audited(
            authorization(&metadata),
            Operation::ListPseudonyms,
            &req.namespace,
            d,
            call,
            |r: &pb::PseudonymServiceListResponse| r.pseudonyms.len() as u64,
        );
        observed(&self.state, "PseudonymService/List", audited).await
    }
}

/// The erasure a request's `mode` names (by number, as the wire has it).
pub(crate) fn erasure_mode(mode: i32) -> Result<crate::service::Erasure, vfps_core::Error> {
    match pb::ErasureMode::try_from(mode) {
        Ok(pb::ErasureMode::Delete) => Ok(crate::service::Erasure::Delete),
        Ok(pb::ErasureMode::Anonymize) => Ok(crate::service::Erasure::Anonymize),
        _ => Err(vfps_core::Error::invalid_argument(format!(
            "mode must be ERASURE_MODE_DELETE or ERASURE_MODE_ANONYMIZE, got {mode}"
        ))),
    }
}
