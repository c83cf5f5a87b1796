//! Admission: per-project limits, so that one project cannot take what
//! another needs (docs/API.md §11.1, RUNBOOK "Per-project limits").
//!
//! Each project has [`ProjectLimits`]: append requests per second and
//! append bytes per second (token buckets), concurrent live readers, the
//! number of collections and stored bytes. A limits table ([`LimitsTable`])
//! gives every project the defaults and overrides them per project; it comes
//! from `--limits-file` (JSON, parsed here) and is replaced whole on
//! `SIGHUP`. A missing limit is no limit.
//!
//! Invariants:
//! * a refused request changes nothing: it took no token, holds no reader
//!   slot, and reached no shard queue;
//! * every refusal says when to come back ([`Refusal::retry_after_ms`]): for
//!   a bucket, the time until it holds enough again; for a held resource (live
//!   readers, collections, stored bytes), a fixed pause;
//! * state is per project and bounded by the number of projects, which the
//!   token table bounds; buckets follow the injected clock, and a clock that
//!   steps back refills nothing.
//!
//! Limits are per server: in a fleet each member enforces them for the
//! requests it serves (a project's fleet-wide rate can reach the limit times
//! the members serving it). Collections and stored bytes are counted from
//! the store and the shards, so they hold fleet-wide.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::Deserialize;

/// Wait suggested after a refusal for a resource a project holds (readers,
/// collections, stored bytes): it frees only when the project lets go.
const HELD_RETRY_AFTER_MS: u64 = 5_000;

/// One project's limits (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectLimits {
    /// Append requests per second (a bucket holding one second's worth).
    pub append_requests_per_second: Option<u64>,
    /// Appended body bytes per second (a bucket holding one second's worth).
    pub append_bytes_per_second: Option<u64>,
    /// Long-polls and SSE streams open at once.
    pub live_readers: Option<u64>,
    /// Live collections (streams) of the project.
    pub collections: Option<u64>,
    /// Stored bytes of the project's streams (docs/API.md, "Usage").
    pub stored_bytes: Option<u64>,
}

impl ProjectLimits {
    /// `self`, with each limit it does not set taken from `defaults`.
    fn over(self, defaults: ProjectLimits) -> ProjectLimits {
        ProjectLimits {
            append_requests_per_second: self
                .append_requests_per_second
                .or(defaults.append_requests_per_second),
            append_bytes_per_second: self
                .append_bytes_per_second
                .or(defaults.append_bytes_per_second),
            live_readers: self.live_readers.or(defaults.live_readers),
            collections: self.collections.or(defaults.collections),
            stored_bytes: self.stored_bytes.or(defaults.stored_bytes),
        }
    }
}

/// Every project's limits: the defaults, and overrides by project name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitsTable {
    defaults: ProjectLimits,
    projects: HashMap<String, ProjectLimits>,
}

/// The limits file as written (docs/RUNBOOK.md, "Per-project limits").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    #[serde(default)]
    default: ProjectLimits,
    #[serde(default)]
    projects: HashMap<String, ProjectLimits>,
}

/// Why a limits file was not taken.
#[derive(Debug, thiserror::Error)]
#[error("limits file {path}: {reason}")]
pub struct LimitsFileError {
    pub path: String,
    pub reason: String,
}

impl LimitsTable {
    /// No limits at all (the default without `--limits-file`).
    pub fn unlimited() -> Self {
        LimitsTable::default()
    }

    /// The same defaults for every project.
    pub fn with_defaults(defaults: ProjectLimits) -> Self {
        LimitsTable {
            defaults,
            projects: HashMap::new(),
        }
    }

    /// Sets `project`'s own limits (unset ones fall back to the defaults).
    pub fn set(&mut self, project: &str, limits: ProjectLimits) {
        self.projects.insert(project.to_string(), limits);
    }

    /// Parses a limits file's text:
    /// `{"default": {…}, "projects": {"name": {…}}}`, every limit optional.
    pub fn parse(path: &str, text: &str) -> Result<Self, LimitsFileError> {
        let error = |reason: String| LimitsFileError {
            path: path.to_string(),
            reason,
        };
        let file: LimitsFile = serde_json::from_str(text).map_err(|e| error(e.to_string()))?;
        for (name, limits) in std::iter::once(("default", &file.default))
            .chain(file.projects.iter().map(|(n, l)| (n.as_str(), l)))
        {
            let rates = [
                limits.append_requests_per_second,
                limits.append_bytes_per_second,
            ];
            if rates.contains(&Some(0)) {
                return Err(error(format!(
                    "{name}: a rate of 0 would refuse every append; leave it out for no limit"
                )));
            }
        }
        Ok(LimitsTable {
            defaults: file.default,
            projects: file.projects,
        })
    }

    /// `project`'s limits.
    pub fn of(&self, project: &str) -> ProjectLimits {
        match self.projects.get(project) {
            Some(own) => own.over(self.defaults),
            None => self.defaults,
        }
    }

    /// How many projects have limits of their own.
    pub fn projects(&self) -> usize {
        self.projects.len()
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    AppendRequests,
    AppendBytes,
    LiveReaders,
    Collections,
    StoredBytes,
}

impl LimitKind {
    pub const ALL: [LimitKind; 5] = [
        LimitKind::AppendRequests,
        LimitKind::AppendBytes,
        LimitKind::LiveReaders,
        LimitKind::Collections,
        LimitKind::StoredBytes,
    ];

    /// The limit's name in a limits file and in error details.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::AppendRequests => "appendRequestsPerSecond",
            LimitKind::AppendBytes => "appendBytesPerSecond",
            LimitKind::LiveReaders => "liveReaders",
            LimitKind::Collections => "collections",
            LimitKind::StoredBytes => "storedBytes",
        }
    }
}

/// A request refused by a project limit: nothing was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub kind: LimitKind,
    pub limit: u64,
    /// When the request may succeed if sent again, at the earliest.
    pub retry_after_ms: u64,
}

/// A token bucket holding up to one second of its rate, in thousandths of
/// a token (so that rates of a few per second refill smoothly every
/// millisecond). Its level may go below zero: a request larger than what is
/// left is admitted once, and the debt delays the next ones.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level_milli: i128,
    refilled_ms: u64,
}

impl Bucket {
    fn full(rate_per_s: u64, now_ms: u64) -> Self {
        Bucket {
            level_milli: i128::from(rate_per_s) * 1000,
            refilled_ms: now_ms,
        }
    }

    fn refill(&mut self, rate_per_s: u64, now_ms: u64) {
        let elapsed_ms = now_ms.saturating_sub(self.refilled_ms);
        let capacity = i128::from(rate_per_s) * 1000;
        self.level_milli =
            (self.level_milli + i128::from(elapsed_ms) * i128::from(rate_per_s)).min(capacity);
        self.refilled_ms = self.refilled_ms.max(now_ms);
    }

    /// Milliseconds until the level reaches `need_milli` (0: it has).
    fn wait_ms(&self, rate_per_s: u64, need_milli: i128) -> u64 {
        let missing = need_milli - self.level_milli;
        if missing <= 0 {
            return 0;
        }
        let rate = i128::from(rate_per_s.max(1));
        u64::try_from((missing + rate - 1) / rate).unwrap_or(u64::MAX)
    }
}

/// What admission keeps for one project.
#[derive(Debug, Default)]
struct ProjectState {
    requests: Option<Bucket>,
    bytes: Option<Bucket>,
    live_readers: u64,
    /// The project's stored bytes and when they were summed.
    stored: Option<(u64, u64)>,
    /// Appends admitted, and their body bytes (for the metrics).
    appends: u64,
    append_bytes: u64,
    /// Requests refused, by limit (in [`LimitKind`] order).
    refused: [u64; 5],
}

/// What the metrics show of one project.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectCounts {
    pub project: String,
    pub appends: u64,
    pub append_bytes: u64,
    pub live_readers: u64,
    /// Refusals by limit, in [`LimitKind::ALL`] order.
    pub refused: [u64; 5],
}

/// The per-project limits in force and the state they are judged on.
#[derive(Debug)]
pub struct Admission {
    table: RwLock<Arc<LimitsTable>>,
    projects: Mutex<HashMap<Arc<str>, ProjectState>>,
}

impl Admission {
    pub fn new(table: LimitsTable) -> Self {
        Admission {
            table: RwLock::new(Arc::new(table)),
            projects: Mutex::new(HashMap::new()),
        }
    }

    /// Puts `table` in force for every later request (a `SIGHUP` reload).
    /// Buckets keep their levels; readers held stay held.
    pub fn replace(&self, table: LimitsTable) {
        *self.table.write() = Arc::new(table);
    }

    /// `project`'s limits now.
    pub fn limits_of(&self, project: &str) -> ProjectLimits {
        self.table.read().of(project)
    }

    /// Takes one append request of `body_bytes` from `project`'s buckets,
    /// or refuses it (taking nothing).
    pub fn admit_append(&self, project: &str, body_bytes: u64, now_ms: u64) -> Result<(), Refusal> {
        let limits = self.limits_of(project);
        let mut projects = self.projects.lock();
        let state = state_of(&mut projects, project);
        let judged = judge_append(state, &limits, body_bytes, now_ms);
        match judged {
            Ok(()) => {
                state.appends += 1;
                state.append_bytes += body_bytes;
                // Until the next sum, the project stores about this much more.
                if let Some((stored, _)) = state.stored.as_mut() {
                    *stored = stored.saturating_add(body_bytes);
                }
            }
            Err(refusal) => state.refused[refusal.kind as usize] += 1,
        }
        judged
    }

    /// A live reader's place in `project`'s budget, held until dropped.
    pub fn live_reader(self: &Arc<Self>, project: &str) -> Result<ReaderPermit, Refusal> {
        let limit = self.limits_of(project).live_readers;
        let mut projects = self.projects.lock();
        let state = state_of(&mut projects, project);
        if let Some(limit) = limit {
            if state.live_readers >= limit {
                state.refused[LimitKind::LiveReaders as usize] += 1;
                return Err(Refusal {
                    kind: LimitKind::LiveReaders,
                    limit,
                    retry_after_ms: HELD_RETRY_AFTER_MS,
                });
            }
        }
        state.live_readers += 1;
        Ok(ReaderPermit {
            admission: self.clone(),
            project: Arc::from(project),
        })
    }

    /// Every project seen since start, with its counts (for the metrics).
    pub fn project_counts(&self) -> Vec<ProjectCounts> {
        self.projects
            .lock()
            .iter()
            .map(|(project, s)| ProjectCounts {
                project: project.to_string(),
                appends: s.appends,
                append_bytes: s.append_bytes,
                live_readers: s.live_readers,
                refused: s.refused,
            })
            .collect()
    }

    /// Counts a refusal judged outside the buckets (collections, stored
    /// bytes) and answers it.
    fn refuse(&self, project: &str, refusal: Refusal) -> Result<(), Refusal> {
        let mut projects = self.projects.lock();
        state_of(&mut projects, project).refused[refusal.kind as usize] += 1;
        Err(refusal)
    }

    /// Refuses a new collection when `project` has `existing` already and
    /// its limit allows no more.
    pub fn admit_collection(&self, project: &str, existing: u64) -> Result<(), Refusal> {
        match self.limits_of(project).collections {
            Some(limit) if existing >= limit => self.refuse(
                project,
                Refusal {
                    kind: LimitKind::Collections,
                    limit,
                    retry_after_ms: HELD_RETRY_AFTER_MS,
                },
            ),
            _ => Ok(()),
        }
    }

    /// Refuses an append when `project` stores `stored` bytes already and
    /// its limit allows no more.
    pub fn admit_stored(&self, project: &str, stored: u64) -> Result<(), Refusal> {
        match self.limits_of(project).stored_bytes {
            Some(limit) if stored >= limit => self.refuse(
                project,
                Refusal {
                    kind: LimitKind::StoredBytes,
                    limit,
                    retry_after_ms: HELD_RETRY_AFTER_MS,
                },
            ),
            _ => Ok(()),
        }
    }

    /// `project`'s stored bytes as last summed, if that was at most
    /// `fresh_ms` before `now_ms`.
    pub fn stored_bytes_cached(&self, project: &str, now_ms: u64, fresh_ms: u64) -> Option<u64> {
        let projects = self.projects.lock();
        let (stored, at_ms) = projects.get(project)?.stored?;
        (now_ms.saturating_sub(at_ms) <= fresh_ms).then_some(stored)
    }

    /// Remembers `project`'s stored bytes, summed at `now_ms`.
    pub fn cache_stored_bytes(&self, project: &str, stored: u64, now_ms: u64) {
        let mut projects = self.projects.lock();
        state_of(&mut projects, project).stored = Some((stored, now_ms));
    }

    /// Live readers `project` holds now.
    pub fn live_readers_of(&self, project: &str) -> u64 {
        self.projects
            .lock()
            .get(project)
            .map_or(0, |state| state.live_readers)
    }
}

/// Takes one append request of `body_bytes` from `state`'s buckets under
/// Refuses with `kind` while `bucket` (of `rate` tokens a second, if
/// limited) holds less than `need_milli` thousandths of a token.
fn short_of(
    kind: LimitKind,
    rate: Option<u64>,
    bucket: Option<&Bucket>,
    need_milli: i128,
) -> Result<(), Refusal> {
    let (Some(rate), Some(bucket)) = (rate, bucket) else {
        return Ok(());
    };
    match bucket.wait_ms(rate, need_milli) {
        0 => Ok(()),
        wait_ms => Err(Refusal {
            kind,
            limit: rate,
            retry_after_ms: wait_ms,
        }),
    }
}

/// `limits`, or refuses it (taking nothing).
fn judge_append(
    state: &mut ProjectState,
    limits: &ProjectLimits,
    body_bytes: u64,
    now_ms: u64,
) -> Result<(), Refusal> {
    let mut requests = limits
        .append_requests_per_second
        .map(|rate| refilled(&mut state.requests, rate, now_ms));
    let mut bytes = limits
        .append_bytes_per_second
        .map(|rate| refilled(&mut state.bytes, rate, now_ms));
    short_of(
        LimitKind::AppendRequests,
        limits.append_requests_per_second,
        requests.as_ref(),
        1000,
    )?;
    // Admitted while anything is left; a large body runs into debt.
    short_of(
        LimitKind::AppendBytes,
        limits.append_bytes_per_second,
        bytes.as_ref(),
        1,
    )?;
    if let Some(bucket) = requests.as_mut() {
        bucket.level_milli -= 1000;
        state.requests = Some(*bucket);
    }
    if let Some(bucket) = bytes.as_mut() {
        bucket.level_milli -= i128::from(body_bytes) * 1000;
        state.bytes = Some(*bucket);
    }
    Ok(())
}

fn state_of<'a>(
    projects: &'a mut HashMap<Arc<str>, ProjectState>,
    project: &str,
) -> &'a mut ProjectState {
    if !projects.contains_key(project) {
        projects.insert(Arc::from(project), ProjectState::default());
    }
    projects
        .get_mut(project)
        .expect("the project's state was just made")
}

/// `slot`'s bucket refilled to `now_ms` (a full one when it had none), as
/// a copy: the caller writes it back only when the request is admitted.
fn refilled(slot: &mut Option<Bucket>, rate_per_s: u64, now_ms: u64) -> Bucket {
    let mut bucket = slot.unwrap_or_else(|| Bucket::full(rate_per_s, now_ms));
    bucket.refill(rate_per_s, now_ms);
    bucket
}

/// A live reader's place in its project's budget.
#[derive(Debug)]
pub struct ReaderPermit {
    admission: Arc<Admission>,
    project: Arc<str>,
}

impl Drop for ReaderPermit {
    fn drop(&mut self) {
        let mut projects = self.admission.projects.lock();
        if let Some(state) = projects.get_mut(&*self.project) {
            state.live_readers = state.live_readers.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(requests: Option<u64>, bytes: Option<u64>) -> ProjectLimits {
        ProjectLimits {
            append_requests_per_second: requests,
            append_bytes_per_second: bytes,
            ..ProjectLimits::default()
        }
    }

    #[test]
    fn a_request_bucket_admits_its_rate_then_says_when_to_come_back() {
        let a = Admission::new(LimitsTable::with_defaults(limits(Some(10), None)));
        for _ in 0..10 {
            a.admit_append("p", 100, 1_000).unwrap();
        }
        let refused = a.admit_append("p", 100, 1_000).unwrap_err();
        assert_eq!(refused.kind, LimitKind::AppendRequests);
        assert_eq!(refused.retry_after_ms, 100, "one token every 100 ms");
        assert!(a.admit_append("p", 100, 1_099).is_err());
        a.admit_append("p", 100, 1_100).unwrap();
        // Another project has its own bucket.
        a.admit_append("q", 100, 1_100).unwrap();
    }

    #[test]
    fn a_refusal_takes_nothing() {
        let a = Admission::new(LimitsTable::with_defaults(limits(Some(1000), Some(1000))));
        a.admit_append("p", 1000, 0).unwrap();
        // The byte bucket is empty: refused, and the request bucket keeps
        // its 999 tokens.
        let refused = a.admit_append("p", 10, 0).unwrap_err();
        assert_eq!(refused.kind, LimitKind::AppendBytes);
        let state = a.projects.lock().get("p").map(|s| s.requests).unwrap();
        assert_eq!(state.unwrap().level_milli, 999_000);
    }

    #[test]
    fn a_large_body_runs_the_byte_bucket_into_debt() {
        let a = Admission::new(LimitsTable::with_defaults(limits(None, Some(1_000))));
        a.admit_append("p", 5_000, 0).unwrap();
        let refused = a.admit_append("p", 1, 0).unwrap_err();
        // 4,000 bytes of debt and one byte more at 1,000 bytes/s.
        assert_eq!(refused.retry_after_ms, 4_001);
        a.admit_append("p", 1, 4_001).unwrap();
    }

    #[test]
    fn a_clock_that_steps_back_refills_nothing() {
        let a = Admission::new(LimitsTable::with_defaults(limits(Some(1), None)));
        a.admit_append("p", 1, 10_000).unwrap();
        assert!(a.admit_append("p", 1, 5_000).is_err());
        assert!(a.admit_append("p", 1, 10_500).is_err());
        a.admit_append("p", 1, 11_000).unwrap();
    }

    #[test]
    fn live_readers_are_held_until_dropped() {
        let mut table = LimitsTable::unlimited();
        table.set(
            "p",
            ProjectLimits {
                live_readers: Some(2),
                ..ProjectLimits::default()
            },
        );
        let a = Arc::new(Admission::new(table));
        let first = a.live_reader("p").unwrap();
        let _second = a.live_reader("p").unwrap();
        assert_eq!(a.live_reader("p").unwrap_err().kind, LimitKind::LiveReaders);
        let others: Vec<_> = (0..10).map(|_| a.live_reader("q").unwrap()).collect();
        drop(first);
        let _third = a.live_reader("p").unwrap();
        assert_eq!(a.live_readers_of("p"), 2);
        drop(others);
        assert_eq!(a.live_readers_of("q"), 0);
    }

    #[test]
    fn the_file_sets_defaults_and_overrides_them_per_limit() {
        let text = r#"{"default": {"appendRequestsPerSecond": 100, "collections": 10},
                       "projects": {"big": {"collections": 1000, "storedBytes": 5}}}"#;
        let table = LimitsTable::parse("f", text).unwrap();
        assert_eq!(table.of("small").collections, Some(10));
        let big = table.of("big");
        assert_eq!(big.collections, Some(1000));
        assert_eq!(big.append_requests_per_second, Some(100));
        assert_eq!(big.stored_bytes, Some(5));
        assert_eq!(table.of("small").stored_bytes, None);
        assert!(LimitsTable::parse("f", r#"{"default": {"collection": 1}}"#).is_err());
        assert!(LimitsTable::parse("f", r#"{"default": {"appendBytesPerSecond": 0}}"#).is_err());
        assert!(LimitsTable::parse("f", "not json").is_err());
        let a = Admission::new(table);
        assert!(a.admit_collection("small", 9).is_ok());
        assert_eq!(
            a.admit_collection("small", 10).unwrap_err().kind,
            LimitKind::Collections
        );
        assert_eq!(
            a.admit_stored("big", 5).unwrap_err().kind,
            LimitKind::StoredBytes
        );
        assert!(a.admit_stored("small", u64::MAX).is_ok());
    }
}
