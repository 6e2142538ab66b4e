//! A batch's answers, fetched on a task of their own while the next batch is
//! read, with transient failures waited out.

use std::sync::Arc;

use vfps_store::Store;

use super::Halt;
use crate::{
    resolve::{load_namespaces, ResolveError, Resolver},
    retry::Persist,
};

/// A batch's answers on a task of its own, waiting out transient failures
/// (the outer error: the runner stopped meanwhile).
pub(super) async fn answer_task(
    resolver: Arc<Resolver>,
    persist: Persist,
    requests: Vec<(usize, String)>,
) -> Answers {
    persist
        .run("reach the database", || answer_once(&resolver, &requests))
        .await
}

/// A spawned batch, aborted if the run ends first (its upsert is idempotent:
/// finishing or not changes nothing another runner relies on).
pub(super) struct Task(pub(super) tokio::task::JoinHandle<Answers>);

/// A batch's answers; the outer error: the runner stopped meanwhile.
pub(super) type Answers = Result<Result<Vec<Option<String>>, ResolveError>, vfps_core::Error>;

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One attempt at a batch's answers: a transient failure as the error (to
/// retry), anything else as the answer. (Named functions rather than async
/// blocks in closures, whose lifetimes the compiler cannot prove `Send`.)
pub(super) async fn answer_once(resolver: &Resolver, requests: &[(usize, String)]) -> Answers {
    match resolver.answer(requests).await {
        Err(ResolveError::Transient(e)) => Err(e),
        other => Ok(other),
    }
}

pub(super) async fn namespaces_once(
    store: Arc<dyn Store>,
    names: Vec<vfps_core::NamespaceName>,
) -> Result<Result<Vec<Arc<vfps_core::Namespace>>, ResolveError>, vfps_core::Error> {
    match load_namespaces(store.as_ref(), &names).await {
        Err(ResolveError::Transient(e)) => Err(e),
        other => Ok(other),
    }
}

pub(super) fn resolve_halt(e: ResolveError) -> Halt {
    match e {
        ResolveError::Transient(e) => Halt::Fail(e.message),
        ResolveError::Value { reason, .. } => Halt::Fail(reason),
        ResolveError::Fatal(reason) => Halt::Fail(reason),
        ResolveError::Restart => {
            Halt::Fail("a namespace's originals kept moving between plain and sealed".into())
        }
    }
}
