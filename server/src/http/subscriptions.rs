//! The reserved `__ds` subscription API (placeholder while the raw surface is
//! brought up; replaced by the full implementation).

use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;

use super::{ApiError, ApiResult, AppState};

pub struct Subscriptions;

pub async fn handle(_state: Arc<AppState>, _request: Request<Incoming>, _api: &str) -> ApiResult {
    Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route"))
}
