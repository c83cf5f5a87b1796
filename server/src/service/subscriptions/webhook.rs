//! The webhook client: SSRF rules, URL validation and bounded delivery.
//!
//! Owns [`WebhookClient`], which checks webhook URLs when a subscription is
//! created and POSTs wakes to them, and the [`DeliveryTarget`] contract through
//! which the delivery loop asks the subscription whether its wake is still
//! current and tells it how each attempt went.
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * a webhook URL is `https` to a public IPv4 address or a domain other than
//!   `localhost`; plain-HTTP loopback URLs pass only when the server runs with
//!   `--allow-loopback-webhooks`; redirects are never followed;
//! * one wake is POSTed at most [`DELIVERY_ATTEMPTS_MAX`] times, with doubling
//!   pauses between failed attempts; after the last the loop ends and the
//!   wake's lease, when it lapses, re-wakes through the normal path (a new
//!   generation, delivered afresh);
//! * at most [`REPLY_BYTES_MAX`] bytes of a webhook's answer are read; a longer
//!   answer counts as a success that is not `done`.

use std::future::Future;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::error::SubError;

/// Most POSTs of one wake before the delivery loop gives up on it.
pub const DELIVERY_ATTEMPTS_MAX: u32 = 5;
/// Most bytes read of a webhook's answer.
pub const REPLY_BYTES_MAX: usize = 64 * 1024;
/// Longest one POST may take, answer included.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after the first failed attempt (it doubles after each further one).
const RETRY_DELAY_MS_FIRST: u64 = 1_000;
/// Longest pause between two attempts.
const RETRY_DELAY_MS_MAX: u64 = 60_000;

/// How hard one wake is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Most attempts per wake (at least one is made).
    pub attempts_max: u32,
    /// Pause after the first failed attempt, doubling after each further one.
    pub first_delay_ms: u64,
    /// Longest pause.
    pub delay_max_ms: u64,
    /// Longest one attempt may take.
    pub timeout: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            attempts_max: DELIVERY_ATTEMPTS_MAX,
            first_delay_ms: RETRY_DELAY_MS_FIRST,
            delay_max_ms: RETRY_DELAY_MS_MAX,
            timeout: WEBHOOK_TIMEOUT,
        }
    }
}

impl DeliveryPolicy {
    /// The pause after failed attempt `attempt` (1-based): the doubled delay,
    /// capped, less 10 % plus up to 20 % of jitter drawn from `random`.
    pub fn delay(&self, attempt: u32, random: u64) -> Duration {
        let shift = attempt.saturating_sub(1).min(6);
        let base = (self.first_delay_ms << shift).min(self.delay_max_ms);
        let jitter = random % (base / 5 + 1);
        Duration::from_millis(base - base / 10 + jitter)
    }
}

/// How one POST went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx answer `{"done": true}`: the wake is acknowledged.
    Done,
    /// A 2xx answer without `done` (or unreadable, or too long): the consumer
    /// will call back.
    Accepted,
    /// No answer, or a non-2xx one.
    Failed,
}

/// What the delivery loop does after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Delivery is over (settled, or the wake is no longer current).
    Stop,
    /// Try again (if attempts are left).
    Retry,
}

/// How a delivery loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryEnd {
    /// The target stopped it: the wake was answered or is no longer current.
    Stopped { attempts: u32 },
    /// Every attempt failed; the wake's lease will re-wake.
    GaveUp { attempts: u32 },
}

/// The wake a delivery loop delivers, as the loop sees it.
pub trait DeliveryTarget: Send + Sync {
    /// Where to POST, or `None` once the wake is no longer current.
    fn url(&self) -> impl Future<Output = Option<String>> + Send;
    /// The `webhook-signature` header for `body`, signed now.
    fn signature(&self, body: &str) -> String;
    /// Takes one attempt's outcome; answers whether to go on.
    fn settle(&self, attempt: Attempt) -> impl Future<Output = Flow> + Send;
    /// Random bits for the jitter of the next pause.
    fn random_u64(&self) -> u64;
}

/// Posts wakes to webhooks and checks webhook URLs.
pub struct WebhookClient {
    http: reqwest::Client,
    allow_loopback: bool,
    policy: DeliveryPolicy,
}

impl WebhookClient {
    pub fn new(allow_loopback: bool, policy: DeliveryPolicy) -> Result<WebhookClient, String> {
        let http = reqwest::Client::builder()
            .timeout(policy.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(WebhookClient {
            http,
            allow_loopback,
            policy,
        })
    }

    /// Checks a webhook URL against the SSRF rules.
    pub fn validate_url(&self, text: &str) -> Result<(), SubError> {
        let rejected = SubError::WebhookUrlRejected;
        let url = url::Url::parse(text).map_err(|_| rejected("not a URL"))?;
        let host = url.host().ok_or_else(|| rejected("no host"))?;
        let loopback = match &host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(_) => false,
        };
        match url.scheme() {
            "http" if loopback && self.allow_loopback => return Ok(()),
            "http" => {
                return Err(rejected(
                    "plain http is only allowed to loopback in development",
                ))
            }
            "https" => {}
            _ => return Err(rejected("use https")),
        }
        match host {
            url::Host::Ipv6(_) => Err(rejected("IPv6 literals are not allowed")),
            url::Host::Ipv4(ip) if !is_public(ip) => Err(rejected("private address")),
            url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") => {
                Err(rejected("localhost"))
            }
            _ => Ok(()),
        }
    }

    /// Delivers `body` to `target`: at most `attempts_max` POSTs, pausing
    /// between failed ones, until the target says stop.
    pub async fn deliver<T: DeliveryTarget>(&self, target: &T, body: &str) -> DeliveryEnd {
        let attempts_max = self.policy.attempts_max.max(1);
        for attempt in 1..=attempts_max {
            let Some(url) = target.url().await else {
                return DeliveryEnd::Stopped {
                    attempts: attempt - 1,
                };
            };
            let outcome = self.post(&url, body, target.signature(body)).await;
            if target.settle(outcome).await == Flow::Stop {
                return DeliveryEnd::Stopped { attempts: attempt };
            }
            if attempt < attempts_max {
                let pause = self.policy.delay(attempt, target.random_u64());
                tokio::time::sleep(pause).await;
            }
        }
        DeliveryEnd::GaveUp {
            attempts: attempts_max,
        }
    }

    /// One POST of `body` to `url`.
    async fn post(&self, url: &str, body: &str, signature: String) -> Attempt {
        let answer = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-signature", signature)
            .body(body.to_string())
            .send()
            .await;
        match answer {
            Ok(mut response) if response.status().is_success() => {
                let done = read_reply(&mut response, REPLY_BYTES_MAX)
                    .await
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| v.get("done").and_then(serde_json::Value::as_bool));
                if done == Some(true) {
                    Attempt::Done
                } else {
                    Attempt::Accepted
                }
            }
            Ok(response) => {
                tracing::debug!(status = %response.status(), "webhook answered with an error");
                Attempt::Failed
            }
            Err(e) => {
                tracing::debug!(error = %e, "webhook delivery failed");
                Attempt::Failed
            }
        }
    }
}

/// The answer's body if it is at most `max` bytes (reading no more than
/// `max` bytes of it), else `None`; `None` too if reading it failed.
async fn read_reply(response: &mut reqwest::Response, max: usize) -> Option<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return None;
    }
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        if chunk.len() > max - out.len() {
            return None;
        }
        out.extend_from_slice(&chunk);
    }
    Some(out)
}

/// Whether a webhook may be sent to `ip`.
fn is_public(ip: Ipv4Addr) -> bool {
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.octets()[0] == 0
        || ip.is_documentation())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::Frame;

    type Reply = hyper::Response<BoxBody<Bytes, Infallible>>;

    /// A webhook receiver on a loopback port: answers the n-th request (from
    /// 1) with `respond(n)` and counts the requests.
    struct Receiver {
        url: String,
        hits: Arc<AtomicU32>,
    }

    async fn receiver(respond: impl Fn(u32) -> Reply + Send + Sync + 'static) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicU32::new(0));
        let respond = Arc::new(respond);
        let counter = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let respond = respond.clone();
                let counter = counter.clone();
                let service = hyper::service::service_fn(move |_request| {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let reply = respond(n);
                    async move { Ok::<_, Infallible>(reply) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
                );
            }
        });
        Receiver { url, hits }
    }

    fn reply(status: u16, body: impl Into<Bytes>) -> Reply {
        let mut response = hyper::Response::new(Full::new(body.into()).boxed());
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        response
    }

    /// `json` followed by spaces, `len` bytes in all.
    fn padded(json: &str, len: usize) -> String {
        format!("{json}{}", " ".repeat(len - json.len()))
    }

    /// A 200 answer whose body never ends.
    fn endless() -> Reply {
        let chunk = Bytes::from(vec![b' '; 4096]);
        let body = StreamBody::new(futures::stream::repeat_with(move || {
            Ok::<_, Infallible>(Frame::data(chunk.clone()))
        }));
        hyper::Response::new(BodyExt::boxed(body))
    }

    /// A target that stays current for `current_for` attempts and records
    /// what it is told.
    struct Target {
        url: String,
        current_for: u32,
        /// Stop once an attempt went this way.
        stop_on: Option<Attempt>,
        settled: parking_lot::Mutex<Vec<Attempt>>,
    }

    impl Target {
        fn new(url: &str) -> Target {
            Target {
                url: url.to_string(),
                current_for: u32::MAX,
                stop_on: None,
                settled: parking_lot::Mutex::new(Vec::new()),
            }
        }

        fn settled(&self) -> Vec<Attempt> {
            self.settled.lock().clone()
        }
    }

    impl DeliveryTarget for Target {
        async fn url(&self) -> Option<String> {
            let made = self.settled.lock().len() as u32;
            (made < self.current_for).then(|| self.url.clone())
        }

        fn signature(&self, _body: &str) -> String {
            "t=0,kid=test,ed25519=x".into()
        }

        async fn settle(&self, attempt: Attempt) -> Flow {
            self.settled.lock().push(attempt);
            if Some(attempt) == self.stop_on || attempt != Attempt::Failed {
                Flow::Stop
            } else {
                Flow::Retry
            }
        }

        fn random_u64(&self) -> u64 {
            7
        }
    }

    fn client(policy: DeliveryPolicy) -> WebhookClient {
        let _ = rustls::crypto::ring::default_provider().install_default();
        WebhookClient::new(true, policy).unwrap()
    }

    /// No pauses between attempts: the tests wait on outcomes, not on time.
    fn no_pauses() -> DeliveryPolicy {
        DeliveryPolicy {
            first_delay_ms: 0,
            ..DeliveryPolicy::default()
        }
    }

    #[tokio::test]
    async fn delivery_stops_after_the_maximum_attempts() {
        let hook = receiver(|_| reply(500, "down")).await;
        let target = Target::new(&hook.url);
        let end = client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(
            end,
            DeliveryEnd::GaveUp {
                attempts: DELIVERY_ATTEMPTS_MAX
            }
        );
        assert_eq!(hook.hits.load(Ordering::SeqCst), DELIVERY_ATTEMPTS_MAX);
        assert_eq!(
            target.settled(),
            vec![Attempt::Failed; DELIVERY_ATTEMPTS_MAX as usize]
        );
    }

    #[tokio::test]
    async fn an_unreachable_webhook_is_given_up_on_too() {
        // A port nobody listens on: every attempt fails to connect.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        drop(listener);
        let target = Target::new(&url);
        let end = client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(
            end,
            DeliveryEnd::GaveUp {
                attempts: DELIVERY_ATTEMPTS_MAX
            }
        );
        assert_eq!(target.settled().len(), DELIVERY_ATTEMPTS_MAX as usize);
    }

    #[tokio::test]
    async fn delivery_retries_until_the_webhook_answers() {
        let hook = receiver(|n| {
            if n < 3 {
                reply(503, "")
            } else {
                reply(200, r#"{"done":true}"#)
            }
        })
        .await;
        let target = Target::new(&hook.url);
        let end = client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(end, DeliveryEnd::Stopped { attempts: 3 });
        assert_eq!(
            target.settled(),
            vec![Attempt::Failed, Attempt::Failed, Attempt::Done]
        );
        assert_eq!(hook.hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn delivery_stops_when_the_wake_is_no_longer_current() {
        let hook = receiver(|_| reply(500, "")).await;
        let target = Target {
            current_for: 2,
            ..Target::new(&hook.url)
        };
        let end = client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(end, DeliveryEnd::Stopped { attempts: 2 });
        assert_eq!(hook.hits.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn pauses_double_up_to_their_cap() {
        let policy = DeliveryPolicy::default();
        // Jitter 0: 90 % of the doubled delay.
        assert_eq!(policy.delay(1, 0), Duration::from_millis(900));
        assert_eq!(policy.delay(2, 0), Duration::from_millis(1_800));
        assert_eq!(policy.delay(3, 0), Duration::from_millis(3_600));
        assert_eq!(policy.delay(7, 0), Duration::from_millis(54_000));
        assert_eq!(policy.delay(40, 0), Duration::from_millis(54_000));
        // Jitter adds at most 20 % of the base.
        assert_eq!(policy.delay(1, 200), Duration::from_millis(1_100));
        assert_eq!(policy.delay(1, 201), Duration::from_millis(900));
    }

    #[tokio::test]
    async fn a_reply_of_the_maximum_size_is_read() {
        let body = padded(r#"{"done":true}"#, REPLY_BYTES_MAX);
        assert_eq!(body.len(), REPLY_BYTES_MAX);
        let hook = receiver(move |_| reply(200, body.clone())).await;
        let target = Target::new(&hook.url);
        client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(target.settled(), vec![Attempt::Done]);
    }

    #[tokio::test]
    async fn a_longer_reply_is_not_read() {
        let body = padded(r#"{"done":true}"#, REPLY_BYTES_MAX + 1);
        let hook = receiver(move |_| reply(200, body.clone())).await;
        let target = Target::new(&hook.url);
        let end = client(no_pauses()).deliver(&target, "{}").await;
        assert_eq!(end, DeliveryEnd::Stopped { attempts: 1 });
        assert_eq!(target.settled(), vec![Attempt::Accepted]);
    }

    /// A reply that never ends is cut off at the bound, not read until the
    /// time-out (an hour here: without the bound the wait below fails).
    #[tokio::test]
    async fn an_endless_reply_is_cut_off_at_the_bound() {
        let hook = receiver(|_| endless()).await;
        let target = Target::new(&hook.url);
        let policy = DeliveryPolicy {
            timeout: Duration::from_secs(3_600),
            ..no_pauses()
        };
        let client = client(policy);
        let end = tokio::time::timeout(Duration::from_secs(60), client.deliver(&target, "{}"))
            .await
            .expect("the endless reply was cut off");
        assert_eq!(end, DeliveryEnd::Stopped { attempts: 1 });
        assert_eq!(target.settled(), vec![Attempt::Accepted]);
    }

    #[test]
    fn public_addresses() {
        assert!(!is_public(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(!is_public(Ipv4Addr::new(127, 0, 0, 1)));
        assert!(!is_public(Ipv4Addr::new(169, 254, 1, 1)));
        assert!(!is_public(Ipv4Addr::new(192, 168, 1, 1)));
        assert!(is_public(Ipv4Addr::new(8, 8, 8, 8)));
    }

    #[test]
    fn webhook_urls_follow_the_ssrf_rules() {
        let strict = client(DeliveryPolicy::default());
        let strict = WebhookClient {
            allow_loopback: false,
            ..strict
        };
        let dev = client(DeliveryPolicy::default());
        let reason = |c: &WebhookClient, url: &str| match c.validate_url(url) {
            Ok(()) => None,
            Err(SubError::WebhookUrlRejected(why)) => Some(why),
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(reason(&strict, "https://example.com/hook"), None);
        assert_eq!(reason(&strict, "https://8.8.8.8/hook"), None);
        assert_eq!(reason(&strict, "nonsense"), Some("not a URL"));
        assert_eq!(reason(&strict, "ftp://example.com/"), Some("use https"));
        assert_eq!(
            reason(&strict, "http://example.com/"),
            Some("plain http is only allowed to loopback in development")
        );
        assert_eq!(
            reason(&strict, "http://127.0.0.1:9/"),
            Some("plain http is only allowed to loopback in development")
        );
        assert_eq!(reason(&dev, "http://127.0.0.1:9/"), None);
        assert_eq!(reason(&dev, "http://localhost:9/"), None);
        assert_eq!(
            reason(&dev, "https://[::1]/"),
            Some("IPv6 literals are not allowed")
        );
        assert_eq!(reason(&dev, "https://10.0.0.1/"), Some("private address"));
        assert_eq!(reason(&dev, "https://localhost/"), Some("localhost"));
    }
}
