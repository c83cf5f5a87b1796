//! `live=sse`: Server-Sent Events over a stream.
//!
//! Framing (LF line ends only): every batch of records is one `event: data`
//! whose payload lines are each prefixed `data:` — the payload is split at every
//! CR, LF and CRLF, so record bytes can never forge an event — immediately
//! followed by one `event: control` with a flat JSON object:
//! `{"streamNextOffset","streamCursor","upToDate"}`, or
//! `{"streamNextOffset","streamClosed":true}` when the stream is closed and
//! read to its end (then the response ends). JSON streams send each batch as a
//! JSON array; binary streams (neither `text/*` nor JSON) send standard base64
//! and say so in `Stream-SSE-Data-Encoding: base64`. An event and its control
//! go out in one write.

use std::convert::Infallible;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use strata_engine::WaitOutcome;
use strata_segments::StreamKey;
use tokio::sync::mpsc;

use super::raw::render;
use super::{ApiResult, AppState, LiveSlot};
use crate::ds::cursor::next_cursor;
use crate::ds::offsets::{Offset, OffsetParam};
use crate::service::{is_json, media_type, ReadFrom, StreamMeta};

/// Frames buffered between the reading task and the connection.
const FRAMES_BUFFERED_MAX: usize = 8;

/// Whether a content type is sent as base64 over SSE.
pub fn is_binary(content_type: &str) -> bool {
    let media = media_type(content_type);
    !(media.starts_with("text/") || is_json(content_type))
}

/// Appends `data:` lines for `payload`, split at CR, LF and CRLF.
fn push_data_lines(out: &mut Vec<u8>, payload: &[u8]) {
    let mut start = 0;
    let mut i = 0;
    while i < payload.len() {
        match payload[i] {
            b'\r' | b'\n' => {
                out.extend_from_slice(b"data:");
                out.extend_from_slice(&payload[start..i]);
                out.push(b'\n');
                if payload[i] == b'\r' && payload.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.extend_from_slice(b"data:");
    out.extend_from_slice(&payload[start..]);
    out.push(b'\n');
}

pub(crate) fn data_event(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(b"event: data\n");
    push_data_lines(out, payload);
    out.push(b'\n');
}

pub(crate) fn control_event(out: &mut Vec<u8>, json: serde_json::Value) {
    out.extend_from_slice(b"event: control\ndata:");
    out.extend_from_slice(json.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

pub async fn serve(
    state: Arc<AppState>,
    project: &str,
    name: String,
    meta: StreamMeta,
    offset: OffsetParam,
    cursor: Option<u64>,
    key: StreamKey,
) -> ApiResult {
    let slot = state.live_slot("live_capacity")?;
    let from = match offset {
        OffsetParam::Start => ReadFrom::Start,
        OffsetParam::Now => ReadFrom::Tail,
        OffsetParam::At(o) => ReadFrom::Position(o.0),
    };
    // Validate the start (offset beyond the tail, wrong key) before streaming.
    let first = state
        .bounded(
            state.deadline(),
            state.streams.read(project, &name, from, &key),
        )
        .await?;
    let binary = is_binary(&meta.content_type);
    let (tx, rx) = mpsc::channel::<Bytes>(FRAMES_BUFFERED_MAX);
    let project = project.to_string();
    tokio::spawn(run(
        state, project, name, key, first, cursor, binary, tx, slot,
    ));
    let body = BodyExt::boxed(StreamBody::new(
        tokio_stream_from(rx).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))),
    ));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(
        "content-type",
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", http::HeaderValue::from_static("no-cache"));
    if binary {
        h.insert(
            "stream-sse-data-encoding",
            http::HeaderValue::from_static("base64"),
        );
    }
    Ok(response)
}

fn tokio_stream_from(mut rx: mpsc::Receiver<Bytes>) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[allow(clippy::too_many_arguments)]
async fn run(
    state: Arc<AppState>,
    project: String,
    name: String,
    key: StreamKey,
    first: crate::service::ReadOutcome,
    mut cursor: Option<u64>,
    binary: bool,
    tx: mpsc::Sender<Bytes>,
    _slot: LiveSlot,
) {
    let streams = &state.streams;
    let mut outcome = first;
    let mut first_round = true;
    loop {
        let mut frame = Vec::new();
        if !outcome.records.is_empty() {
            let payload = render(&outcome.content_type, &outcome);
            if binary {
                let encoded = base64::engine::general_purpose::STANDARD.encode(&payload);
                data_event(&mut frame, encoded.as_bytes());
            } else {
                data_event(&mut frame, &payload);
            }
        }
        let next = Offset(outcome.next).to_string();
        if outcome.at_end() {
            control_event(
                &mut frame,
                serde_json::json!({"streamNextOffset": next, "streamClosed": true}),
            );
            let _ = tx.send(Bytes::from(frame)).await;
            return;
        }
        if !outcome.records.is_empty() || first_round {
            let random = u64::from_le_bytes(streams.random_bytes16()[..8].try_into().expect("8"));
            let value = next_cursor(streams.now_ms(), cursor, random);
            cursor = Some(value);
            let mut control = serde_json::json!({
                "streamNextOffset": next,
                "streamCursor": value.to_string(),
            });
            if outcome.up_to_date() {
                control["upToDate"] = serde_json::Value::Bool(true);
            }
            control_event(&mut frame, control);
        }
        first_round = false;
        if !frame.is_empty() && tx.send(Bytes::from(frame)).await.is_err() {
            return;
        }
        let position = outcome.next;
        if outcome.up_to_date() {
            let timeout = state.config.long_poll_timeout;
            let wait = streams.wait(&project, &name, position, timeout);
            let waited = tokio::select! {
                waited = state.bounded(state.deadline() + timeout, wait) => waited,
                _ = tx.closed() => return,
            };
            match waited {
                Ok(WaitOutcome::Ready { .. }) => {}
                Ok(WaitOutcome::TimedOut { .. }) => {
                    // Keep-alive: the position, still up to date.
                    let random =
                        u64::from_le_bytes(streams.random_bytes16()[..8].try_into().expect("8"));
                    let value = next_cursor(streams.now_ms(), cursor, random);
                    cursor = Some(value);
                    let mut frame = Vec::new();
                    control_event(
                        &mut frame,
                        serde_json::json!({
                            "streamNextOffset": Offset(position).to_string(),
                            "streamCursor": value.to_string(),
                            "upToDate": true,
                        }),
                    );
                    if tx.send(Bytes::from(frame)).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        // A read the store does not answer in time ends the stream (the
        // client reconnects from its last offset).
        let read = streams.read(&project, &name, ReadFrom::Position(position), &key);
        outcome = match state.bounded(state.deadline(), read).await {
            Ok(o) => o,
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(payload: &[u8]) -> String {
        let mut out = Vec::new();
        push_data_lines(&mut out, payload);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_line_break_starts_a_new_data_line() {
        assert_eq!(lines(b"a\nb"), "data:a\ndata:b\n");
        assert_eq!(lines(b"a\r\nb"), "data:a\ndata:b\n");
        assert_eq!(lines(b"a\rb"), "data:a\ndata:b\n");
        assert_eq!(
            lines(b"a\r\n\r\nevent: control"),
            "data:a\ndata:\ndata:event: control\n"
        );
        assert_eq!(lines(b""), "data:\n");
        assert_eq!(lines(b"x\n"), "data:x\ndata:\n");
    }

    #[test]
    fn binary_detection() {
        assert!(!is_binary("text/plain"));
        assert!(!is_binary("application/json; charset=utf-8"));
        assert!(is_binary("application/octet-stream"));
        assert!(is_binary("image/png"));
    }
}
