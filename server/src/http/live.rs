//! Live reads of both surfaces (docs/ARCHITECTURE.md, "The HTTP layer"):
//! long-poll (raw `live=long-poll`, product `records:long-poll`) and
//! Server-Sent Events (raw `live=sse`, product `records:sse`).
//!
//! One loop, [`next_records`], reads and waits for appends for all four;
//! one task, [`sse`], sends the events of both SSE surfaces. What differs
//! between the surfaces is given to them: which reads to do ([`LiveRead`]),
//! how long and how patiently to wait ([`Pace`]), and how a read is framed
//! on the wire ([`SseFraming`]).
//!
//! SSE framing (LF line ends only): every batch of records is one
//! `event: data` whose payload lines are each prefixed `data:` — the payload
//! is split at every CR, LF and CRLF, so record bytes can never forge an
//! event — followed by the surface's `event: control` with a flat JSON
//! object. JSON streams send each batch as a JSON array; binary streams
//! (neither `text/*` nor JSON) send standard base64 and say so in
//! `Stream-SSE-Data-Encoding: base64`. An event and its control go out in
//! one write.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::header::HeaderValue;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use strata_engine::WaitOutcome;
use tokio::sync::mpsc;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::common::{render, ApiError, AppState, Body, LiveSlot, LIVE_BUDGET_WAIT_MAX};
use crate::service::{is_json, media_type, ReadFrom, ReadOutcome, ServiceError};

/// Frames buffered between the reading task and the connection: one, so
/// that the task reads ahead by at most one frame of a slow client.
const FRAMES_BUFFERED_MAX: usize = 1;

/// An SSE frame and its bytes of the server's live budget, held until the
/// connection asks for the next frame (it has taken this one by then).
type Held = (Bytes, Option<OwnedSemaphorePermit>);

/// What a live reader reads: one stream, through its surface's reads.
pub trait LiveRead: Send + Sync + 'static {
    fn project(&self) -> &str;
    fn name(&self) -> &str;
    /// One read from `from`, bounded by the store's deadline, its errors as
    /// the surface answers them.
    fn read(
        &self,
        state: &AppState,
        from: ReadFrom,
    ) -> impl Future<Output = Result<ReadOutcome, ApiError>> + Send;
    /// A service error of a wait for appends, as the surface answers it.
    fn error(&self, e: ServiceError) -> ApiError;
    /// Payload bytes one read returns at most (one record may exceed it).
    fn read_bytes_max(&self) -> usize;
}

/// How long a live read waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Each wait for an append lasts at most this long (raw: the server's
    /// long-poll timeout); the live read as a whole has no end of its own.
    Each(Duration),
    /// Every wait ends by this instant, and so does the live read (product:
    /// `waitMs`).
    Until(Instant),
}

/// How a surface's live reads wait for appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub limit: Limit,
    /// Reads go on past wake-ups and pages that bring none of the reader's
    /// records (product: appends of other routing keys) until records come,
    /// the stream ends, nothing moves, or the limit passes. Else one wait and
    /// one read answer (raw).
    pub persist: bool,
    /// A read without records waits whether or not it reached the tail, and
    /// a closed stream does not wait even before its end (raw long-poll).
    /// Else only a read at the tail waits, and only the stream's end stops
    /// the waiting.
    pub wait_unless_closed: bool,
}

impl Pace {
    /// Raw `live=long-poll`: one wait of `timeout`, then one read.
    pub fn raw_long_poll(timeout: Duration) -> Pace {
        Pace {
            limit: Limit::Each(timeout),
            persist: false,
            wait_unless_closed: true,
        }
    }

    /// Raw `live=sse`: between events, one wait of `timeout` at the tail
    /// (a keep-alive when it times out), then one read.
    pub fn raw_sse(timeout: Duration) -> Pace {
        Pace {
            limit: Limit::Each(timeout),
            persist: false,
            wait_unless_closed: false,
        }
    }

    /// Product `records:long-poll` and `records:sse`: on until `wait` from
    /// now.
    pub fn product(wait: Duration) -> Pace {
        Pace {
            limit: Limit::Until(Instant::now() + wait),
            persist: true,
            wait_unless_closed: false,
        }
    }
}

/// Where [`next_records`] stopped.
pub struct Next {
    pub outcome: ReadOutcome,
    /// The last wait timed out (nothing was read after it).
    pub timed_out: bool,
    /// The live budget reserved before the last read (SSE only).
    pub reservation: Option<OwnedSemaphorePermit>,
}

/// Reads from `outcome.next` and waits for appends, at `pace`, until the
/// reader's records arrive (or, for a raw pace, after one wait and one
/// read). A long-poll answers with what it ends with; SSE sends it, and
/// asks for each read to `reserve` its frame's bytes of the live budget
/// first (after the wait: a waiting reader holds none).
pub async fn next_records<R: LiveRead>(
    state: &AppState,
    reader: &R,
    mut outcome: ReadOutcome,
    pace: &Pace,
    reserve: bool,
) -> Result<Next, ApiError> {
    let mut reservation = None;
    // Each round either moves the position forward or waits for an append
    // (a raw pace does one round).
    loop {
        let done = if pace.wait_unless_closed {
            outcome.closed
        } else {
            outcome.at_end()
        };
        if !outcome.records.is_empty() || done {
            break;
        }
        let wait_for = match pace.limit {
            Limit::Each(timeout) => timeout,
            Limit::Until(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                deadline - now
            }
        };
        if pace.wait_unless_closed || outcome.up_to_date() {
            let wait = state
                .streams
                .wait(reader.project(), reader.name(), outcome.next, wait_for);
            // The wait's own bound, and the store's should its lookup need it.
            let waited = state
                .bounded(state.deadline() + wait_for, wait)
                .await
                .map_err(|e| reader.error(e))?;
            if let WaitOutcome::TimedOut { .. } = waited {
                return Ok(Next {
                    outcome,
                    timed_out: true,
                    reservation,
                });
            }
        }
        if reserve && reservation.is_none() {
            reservation = Some(
                state
                    .reserve_live(frame_bytes_max(reader), LIVE_BUDGET_WAIT_MAX)
                    .await?,
            );
        }
        let before = outcome.next;
        outcome = reader.read(state, ReadFrom::Position(before)).await?;
        if !pace.persist {
            break;
        }
        if outcome.records.is_empty() && !outcome.up_to_date() && outcome.next == before {
            // No progress and nothing to wait for: answer, never spin.
            break;
        }
    }
    Ok(Next {
        outcome,
        timed_out: false,
        reservation,
    })
}

/// The bytes an SSE frame of one of `reader`'s reads takes at most (one
/// record larger than the read's bound aside): base64 or JSON escaping
/// and the event lines at most double the payload.
pub fn frame_bytes_max<R: LiveRead>(reader: &R) -> usize {
    reader
        .read_bytes_max()
        .saturating_mul(2)
        .saturating_add(64 << 10)
}

/// `reserved` cut or grown to exactly `len` bytes of the live budget
/// (growing waits, bounded; `None` when the budget has no room in time).
async fn fitted(
    state: &AppState,
    reserved: Option<OwnedSemaphorePermit>,
    len: usize,
) -> Option<OwnedSemaphorePermit> {
    match reserved {
        Some(mut permit) if permit.num_permits() >= len => {
            // The rest goes back to the budget as `permit` drops.
            permit.split(len)
        }
        Some(mut permit) => {
            let more = state
                .reserve_live(len - permit.num_permits(), LIVE_BUDGET_WAIT_MAX)
                .await
                .ok()?;
            permit.merge(more);
            Some(permit)
        }
        None => state.reserve_live(len, LIVE_BUDGET_WAIT_MAX).await.ok(),
    }
}

/// A long-poll after its first read: what it answers with.
pub async fn long_poll<R: LiveRead>(
    state: &AppState,
    reader: &R,
    first: ReadOutcome,
    pace: Pace,
) -> Result<ReadOutcome, ApiError> {
    tokio::select! {
        next = next_records(state, reader, first, &pace, false) => Ok(next?.outcome),
        _ = state.closed(state.live_ticket()) => Err(reader.error(ServiceError::Unavailable(
            "this server is shutting down; retry".into(),
        ))),
    }
}

/// How a surface frames its reads as events.
pub trait SseFraming: Send + 'static {
    /// The response's `Cache-Control`.
    const CACHE_CONTROL: &'static str;
    /// Whether data goes out as base64 ([`is_binary`] of the content type).
    fn binary(&self) -> bool;
    /// The events for one read, written to `out` (nothing: nothing is sent).
    fn events(&mut self, state: &AppState, outcome: &ReadOutcome, out: &mut Vec<u8>);
    /// After a wait at `position` timed out: writes a keep-alive to `out` and
    /// answers true (the position is then read again), or answers false (the
    /// live read goes on only if the position moved).
    fn keep_alive(&mut self, state: &AppState, position: u64, out: &mut Vec<u8>) -> bool;
}

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

/// The `event: data` of a read's records (base64 when `binary`).
pub fn data_event(out: &mut Vec<u8>, outcome: &ReadOutcome, binary: bool) {
    let payload = render(&outcome.content_type, outcome);
    out.extend_from_slice(b"event: data\n");
    if binary {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&payload);
        push_data_lines(out, encoded.as_bytes());
    } else {
        push_data_lines(out, &payload);
    }
    out.push(b'\n');
}

/// An `event: control` with `json`.
pub fn control_event(out: &mut Vec<u8>, json: serde_json::Value) {
    out.extend_from_slice(b"event: control\ndata:");
    out.extend_from_slice(json.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// The SSE response after its first read (made under `reserved`, its
/// frame's share of the live budget): a task reads, waits and sends events
/// until the stream ends, the pace's limit passes, a read fails, or the
/// client hangs up; `slot` is held until then.
pub fn sse<R: LiveRead, F: SseFraming>(
    state: Arc<AppState>,
    slot: LiveSlot,
    reader: R,
    framing: F,
    first: (ReadOutcome, OwnedSemaphorePermit),
    pace: Pace,
) -> Response<Body> {
    let binary = framing.binary();
    let (tx, rx) = mpsc::channel::<Held>(FRAMES_BUFFERED_MAX);
    tokio::spawn(run(state, reader, framing, first, pace, tx, slot));
    // The connection asks for the next frame once it took the last: the
    // last frame's permit goes back to the budget then.
    let stream = futures::stream::unfold((rx, None), |(mut rx, _taken)| async move {
        let (bytes, permit): Held = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), (rx, permit)))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static(F::CACHE_CONTROL));
    if binary {
        h.insert(
            "stream-sse-data-encoding",
            HeaderValue::from_static("base64"),
        );
    }
    response
}

async fn run<R: LiveRead, F: SseFraming>(
    state: Arc<AppState>,
    reader: R,
    mut framing: F,
    first: (ReadOutcome, OwnedSemaphorePermit),
    pace: Pace,
    tx: mpsc::Sender<Held>,
    slot: LiveSlot,
) {
    let (mut outcome, first_reserved) = first;
    let mut reserved = Some(first_reserved);
    // Each round sends the events of a read, then reads and waits for more.
    loop {
        let mut frame = Vec::new();
        framing.events(&state, &outcome, &mut frame);
        if !frame.is_empty() {
            // Without room in the budget in time, the stream ends (the
            // client reconnects from its last position).
            let Some(permit) = fitted(&state, reserved.take(), frame.len()).await else {
                return;
            };
            if tx.send((Bytes::from(frame), Some(permit))).await.is_err() {
                return;
            }
        }
        drop(reserved.take());
        if outcome.at_end() {
            return;
        }
        if let Limit::Until(deadline) = pace.limit {
            if deadline <= Instant::now() {
                return;
            }
        }
        let position = outcome.next;
        let waiting = ReadOutcome {
            records: Vec::new(),
            ..outcome
        };
        let next = tokio::select! {
            next = next_records(&state, &reader, waiting, &pace, true) => next,
            _ = tx.closed() => return,
            // The server stops: the stream ends and the client reconnects.
            _ = slot.closed() => return,
        };
        // A read or a wait the store does not answer in time ends the
        // stream (the client reconnects from its last position).
        let Ok(next) = next else {
            return;
        };
        outcome = next.outcome;
        reserved = next.reservation;
        if next.timed_out {
            let mut frame = Vec::new();
            if framing.keep_alive(&state, position, &mut frame) {
                // A keep-alive is a few bytes: not counted.
                if tx.send((Bytes::from(frame), None)).await.is_err() {
                    return;
                }
                let Ok(permit) = state
                    .reserve_live(frame_bytes_max(&reader), LIVE_BUDGET_WAIT_MAX)
                    .await
                else {
                    return;
                };
                reserved = Some(permit);
                outcome = match reader.read(&state, ReadFrom::Position(position)).await {
                    Ok(o) => o,
                    Err(_) => return,
                };
                continue;
            }
        }
        if pace.persist
            && outcome.records.is_empty()
            && !outcome.at_end()
            && outcome.next == position
        {
            return;
        }
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
