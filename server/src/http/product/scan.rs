//! `GET /v1/streams/{name}:scan?cursor=&maxBytes=`: a page of a snapshot scan
//! (docs/API.md, "Snapshot scans"). The body is a JSON array of
//! `{"routingKey","value"}` (JSON collections: the record itself) or
//! `{"routingKey","valueB64"}` (other formats: standard base64 with
//! padding); `Prisma-Next-Scan-Cursor` carries the scan on, or
//! `Prisma-Scan-Complete: true` ends it. Checks run in the contract's
//! order: exists (404/410), the key (403), then the cursor (400
//! `invalid_cursor`, 410 `scan_expired`).

use std::sync::Arc;

use base64::Engine as _;
use http::{Response, StatusCode};
use strata_segments::StreamKey;

use super::super::common::{full, set, ApiResult, AppState, Body};
use super::errors::{bad, error, service_error};
use crate::service::product::scan_cursor::ScanScope;
use crate::service::{is_json, ScanFrom, ScanItem, ScanPage};

/// One scan page's request.
pub struct ScanCall<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub key: StreamKey,
    pub cursor: Option<String>,
    pub max_bytes: usize,
}

pub async fn scan(state: &Arc<AppState>, call: ScanCall<'_>) -> ApiResult {
    let lookup = state.streams.keyed_meta(call.project, call.name, &call.key);
    let (_, epoch) = state
        .bounded(state.deadline(), lookup)
        .await
        .map_err(service_error)?;
    let scope = ScanScope {
        project: call.project,
        epoch,
        key: &call.key,
    };
    let from = match &call.cursor {
        None => ScanFrom::Start,
        Some(token) => {
            let cursor = scope
                .decode(token)
                .ok_or_else(|| bad("invalid_cursor", "not a scan cursor of this collection"))?;
            if cursor.expired(state.streams.now_ms()) {
                return Err(error(
                    StatusCode::GONE,
                    "scan_expired",
                    "the scan's cursor has expired; start a new scan",
                ));
            }
            ScanFrom::Resume(cursor)
        }
    };
    let page = state
        .bounded(
            state.deadline(),
            state
                .streams
                .scan(call.project, call.name, &call.key, from, call.max_bytes),
        )
        .await
        .map_err(service_error)?;
    Ok(page_response(&scope, &page))
}

fn page_response(scope: &ScanScope<'_>, page: &ScanPage) -> Response<Body> {
    let mut response = Response::new(full(render(page)));
    set(&mut response, "content-type", "application/json");
    set(&mut response, "cache-control", "no-store");
    if page.cursor.complete() {
        set(&mut response, "prisma-scan-complete", "true");
    } else {
        set(
            &mut response,
            "prisma-next-scan-cursor",
            scope.encode(&page.cursor),
        );
    }
    response
}

/// The page's JSON array. A JSON collection's records are valid JSON (checked
/// on append), so they are written as they are.
fn render(page: &ScanPage) -> Vec<u8> {
    let json = is_json(&page.content_type);
    let payload_bytes: usize = page.items.iter().map(|i| i.payload.len()).sum();
    let mut out = Vec::with_capacity(payload_bytes * 4 / 3 + page.items.len() * 32 + 2);
    out.push(b'[');
    for (n, item) in page.items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        render_item(&mut out, item, json);
    }
    out.push(b']');
    out
}

fn render_item(out: &mut Vec<u8>, item: &ScanItem, json: bool) {
    let routing_key = String::from_utf8_lossy(&item.routing_key);
    out.extend_from_slice(b"{\"routingKey\":");
    out.extend_from_slice(
        serde_json::to_string(routing_key.as_ref())
            .unwrap_or_else(|_| "\"\"".into())
            .as_bytes(),
    );
    if json {
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&item.payload);
    } else {
        out.extend_from_slice(b",\"valueB64\":\"");
        out.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(&item.payload)
                .as_bytes(),
        );
        out.push(b'"');
    }
    out.push(b'}');
}
