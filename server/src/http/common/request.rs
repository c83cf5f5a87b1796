//! Request reading shared by both surfaces (docs/ARCHITECTURE.md, "The HTTP
//! layer"): bounded body reading, header text, the stream-name rules both
//! surfaces share, and the idempotent producer's `Producer-*` headers.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use strata_wal::PRODUCER_ID_BYTES_MAX;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// Producer epochs and sequences stay JavaScript-safe integers.
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// A request header as text (400 with `code` when it is not visible ASCII).
pub fn ascii_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                code,
                format!("header {name} is not ASCII"),
            )
        }),
    }
}

/// Why a stream name in a path is refused (each surface words the answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the name is not UTF-8")]
    NotUtf8,
    #[error("use 1 to {max_bytes} bytes")]
    Length { max_bytes: usize },
    #[error("control characters are not allowed")]
    Control,
    #[error("empty, '.' and '..' path segments are not allowed")]
    Segment,
    #[error("names starting with '__' are reserved")]
    Reserved,
}

/// Decodes a stream name from a request path (percent-decoded once) and
/// checks the rules both surfaces share: UTF-8, 1 to `max_bytes` bytes, no
/// control characters, no empty, `.` or `..` segment, no leading `__`
/// (reserved).
pub fn decode_stream_name(raw: &str, max_bytes: usize) -> Result<String, NameError> {
    let name = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| NameError::NotUtf8)?;
    if name.is_empty() || name.len() > max_bytes {
        return Err(NameError::Length { max_bytes });
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::Control);
    }
    if name
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(NameError::Segment);
    }
    if name.starts_with("__") {
        return Err(NameError::Reserved);
    }
    Ok(name.into_owned())
}

/// Longest a request body may take to arrive (408 after it), and longest it
/// may pause between two parts (408 too): a client that stalls, or trickles,
/// cannot hold the bytes it sent of the body budget for longer.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a body waits for room in the budget before the request is
/// refused (503, nothing applied).
pub const BODY_BUDGET_WAIT_MAX: Duration = Duration::from_secs(10);

/// A request body read whole, holding its bytes of the server's budget for
/// buffered bodies until dropped.
pub struct BufferedBody {
    pub bytes: Bytes,
    _budget: Option<OwnedSemaphorePermit>,
}

/// Reads a request body up to `limit` bytes (413 beyond it, answered once
/// the rest was drained: see [`drained`]), its bytes
/// taken from `budget` before they are kept: bodies being read and held
/// never exceed the budget together. A body of declared length takes its
/// whole length first; a chunked one takes each part as it comes. Waiting
/// for the budget takes at most [`BODY_BUDGET_WAIT_MAX`] each time (503:
/// nothing was applied) and does not count against the client's time: the
/// client must send the body within [`BODY_READ_TIMEOUT`], pausing at most
/// [`BODY_IDLE_TIMEOUT`] (408 otherwise), so that a client that stalls or
/// trickles cannot hold its share of the budget for longer.
pub async fn read_body_within(
    mut body: Incoming,
    limit: usize,
    budget: &Arc<Semaphore>,
) -> Result<BufferedBody, ApiError> {
    let mut held = BudgetHeld::default();
    if let Some(declared) = hyper::body::Body::size_hint(&body).exact() {
        let declared = usize::try_from(declared).unwrap_or(usize::MAX);
        if declared > limit {
            return Err(drained(body, too_large(limit)).await);
        }
        if let Err(refusal) = held.take(budget, declared).await {
            return Err(drained(body, refusal).await);
        }
    }
    let mut deadline = tokio::time::Instant::now() + BODY_READ_TIMEOUT;
    let mut out = BytesMut::with_capacity(held.bytes.min(limit));
    loop {
        let idle = deadline.min(tokio::time::Instant::now() + BODY_IDLE_TIMEOUT);
        let frame = match tokio::time::timeout_at(idle, body.frame()).await {
            Err(_) => return Err(body_timeout()),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad_request(format!("reading the body: {e}")))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let total = out.len() + data.len();
        if total > limit {
            return Err(drained(body, too_large(limit)).await);
        }
        if total > held.bytes {
            let waited = tokio::time::Instant::now();
            if let Err(refusal) = held.take(budget, total - held.bytes).await {
                return Err(drained(body, refusal).await);
            }
            deadline += waited.elapsed();
        }
        out.extend_from_slice(&data);
    }
    Ok(BufferedBody {
        bytes: out.freeze(),
        _budget: held.permit,
    })
}

/// The bytes of the body budget one body holds.
#[derive(Default)]
struct BudgetHeld {
    permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl BudgetHeld {
    /// Takes `more` bytes of `budget`, waiting at most
    /// [`BODY_BUDGET_WAIT_MAX`] (503 after it).
    async fn take(&mut self, budget: &Arc<Semaphore>, more: usize) -> Result<(), ApiError> {
        if more == 0 {
            return Ok(());
        }
        let n = u32::try_from(more).map_err(|_| budget_spent())?;
        let permit =
            match tokio::time::timeout(BODY_BUDGET_WAIT_MAX, budget.clone().acquire_many_owned(n))
                .await
            {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) | Err(_) => return Err(budget_spent()),
            };
        match self.permit.as_mut() {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.bytes += more;
        Ok(())
    }
}

/// Bounds on reading and dropping what is left of a refused body.
#[derive(Debug, Clone, Copy)]
struct DiscardBounds {
    bytes_max: usize,
    time_max: Duration,
    /// Longest pause of the client's.
    idle_max: Duration,
}

/// Before the refusal is answered: a body this short keeps the connection.
const DISCARD_BEFORE_ANSWER: DiscardBounds = DiscardBounds {
    bytes_max: 1 << 20,
    time_max: Duration::from_secs(2),
    idle_max: Duration::from_secs(2),
};

/// After the refusal is answered (the connection then closes): long enough
/// for a client still sending the body to finish and read the answer.
const DISCARD_AFTER_ANSWER: DiscardBounds = DiscardBounds {
    bytes_max: 64 << 20,
    time_max: Duration::from_secs(2),
    idle_max: Duration::from_millis(200),
};

/// How far reading and dropping a body got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Discarded {
    /// To its end.
    Whole,
    /// Stopped at a bound: more may follow.
    Cut,
    /// The connection failed under it.
    Broken,
}

/// Reads and drops `body` within `bounds`, keeping nothing.
async fn discard(body: &mut Incoming, bounds: DiscardBounds) -> Discarded {
    let deadline = tokio::time::Instant::now() + bounds.time_max;
    let mut left = bounds.bytes_max;
    loop {
        let idle = deadline.min(tokio::time::Instant::now() + bounds.idle_max);
        match tokio::time::timeout_at(idle, body.frame()).await {
            Ok(None) => return Discarded::Whole,
            Ok(Some(Ok(frame))) => {
                let size = frame.data_ref().map_or(0, |d| d.len());
                match left.checked_sub(size) {
                    Some(rest) => left = rest,
                    None => return Discarded::Cut,
                }
            }
            Ok(Some(Err(_))) => return Discarded::Broken,
            Err(_) => return Discarded::Cut,
        }
    }
}

/// `refusal`, once what is left of `body` was read and dropped (within
/// [`DISCARD_BEFORE_ANSWER`]), so that the connection can carry the
/// client's next request. A body longer or slower than that is not waited
/// for: the refusal then says `Connection: close`, as the connection closes
/// after it (a client that sent its next request on it would lose that
/// request). Until it closes, the rest is still read and dropped (within
/// [`DISCARD_AFTER_ANSWER`]): closing with unread bytes makes the client's
/// kernel see a reset, and a client still writing the body would fail its
/// write instead of reading the answer (RFC 9112 §9.6, "Tear-down").
async fn drained(mut body: Incoming, refusal: ApiError) -> ApiError {
    let declared = hyper::body::Body::size_hint(&body).exact();
    let discarded = if declared.is_some_and(|n| n > DISCARD_BEFORE_ANSWER.bytes_max as u64) {
        Discarded::Cut
    } else {
        discard(&mut body, DISCARD_BEFORE_ANSWER).await
    };
    match discarded {
        Discarded::Whole => refusal,
        Discarded::Cut => {
            tokio::spawn(async move { discard(&mut body, DISCARD_AFTER_ANSWER).await });
            refusal.header("connection", "close")
        }
        Discarded::Broken => refusal.header("connection", "close"),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("request body exceeds {limit} bytes"),
    )
}

fn body_timeout() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request body did not arrive within {} s, or paused for {} s",
            BODY_READ_TIMEOUT.as_secs(),
            BODY_IDLE_TIMEOUT.as_secs()
        ),
    )
    // The rest of the body is not waited for: the connection closes.
    .header("connection", "close")
}

fn budget_spent() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "too many request bodies are being read; the request was not applied",
    )
    .header("retry-after", "1")
}

/// An idempotent producer's headers (its claim also needs the body's digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerHeaders {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// `Producer-Id`, `Producer-Epoch` and `Producer-Seq`: all three or none,
/// the id UTF-8 of 1 to [`PRODUCER_ID_BYTES_MAX`] bytes, the numbers
/// JavaScript-safe. Refusals are 400 `bad_request` (the product renames
/// the code).
pub fn producer_headers(headers: &HeaderMap) -> Result<Option<ProducerHeaders>, ApiError> {
    // An id is UTF-8 (not only ASCII); the numbers are ASCII digits.
    let id = match headers.get("producer-id") {
        None => None,
        Some(v) => Some(
            std::str::from_utf8(v.as_bytes())
                .map_err(|_| ApiError::bad_request("Producer-Id must be UTF-8"))?,
        ),
    };
    let epoch = ascii_header(headers, "producer-epoch", "bad_request")?;
    let seq = ascii_header(headers, "producer-seq", "bad_request")?;
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(ApiError::bad_request(
                "Producer-Id, Producer-Epoch and Producer-Seq go together",
            ))
        }
    };
    if id.is_empty() {
        return Err(ApiError::bad_request("Producer-Id must not be empty"));
    }
    if id.len() > PRODUCER_ID_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "Producer-Id is longer than {PRODUCER_ID_BYTES_MAX} bytes"
        )));
    }
    let number = |text: &str, what: &str| {
        text.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= SAFE_INTEGER_MAX && text.trim().bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ApiError::bad_request(format!("{what} must be a non-negative integer")))
    };
    Ok(Some(ProducerHeaders {
        id: id.to_string(),
        epoch: number(epoch, "Producer-Epoch")?,
        seq: number(seq, "Producer-Seq")?,
    }))
}
