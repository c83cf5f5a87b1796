//! Runs the real `strata` binary for integration tests.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A development key the test servers use for requests without one.
pub const DEV_KEY: &str = "dGVzdC1kZXZlbG9wbWVudC1rZXktMzItYnl0ZXMhISE";

/// An HTTP client for tests (rustls needs its crypto provider first).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A request with a JSON body, and a bearer token when given.
pub fn json_request(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: &serde_json::Value,
) -> reqwest::RequestBuilder {
    let request = client
        .request(method, url)
        .header("content-type", "application/json")
        .body(body.to_string());
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `strata serve`.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub port: u16,
    /// The log file's length when this process started: what came before
    /// is another process's (ports, and so log files, are reused).
    pub log_from: u64,
}

impl Server {
    /// Starts the binary and waits until it answers /healthz.
    pub async fn start(store: &str, port: u16, extra: &[&str]) -> Server {
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--store".into(),
            store.to_string(),
            "--long-poll-timeout-ms".into(),
            "500".into(),
            "--dev-default-key".into(),
            DEV_KEY.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        // The server's log goes to a file named after the port, appended to
        // across restarts, for the test that fails to point at.
        let log_path = std::env::temp_dir().join(format!("strata-test-server-{port}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("server log file");
        let log_from = log.metadata().map(|m| m.len()).unwrap_or(0);
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(&args)
            .env(
                "RUST_LOG",
                "warn,strata_engine=info,strata_manifest=debug,strata_server::service::fleet=info,strata_server::service::subscriptions=info",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("strata starts");
        // Owned at once, so a failed start still kills and reaps the child.
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            log_from,
        };
        let client = client();
        for _ in 0..600 {
            if let Ok(r) = client.get(format!("{}/healthz", server.base)).send().await {
                if r.status().is_success() {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("strata did not start on port {port}");
    }

    /// Where the server's log goes.
    pub fn log_path(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("strata-test-server-{}.log", self.port))
    }

    /// What this process has written to its log so far.
    pub fn log_text(&self) -> String {
        let all = std::fs::read(self.log_path()).unwrap_or_default();
        let from = usize::try_from(self.log_from).unwrap_or(0).min(all.len());
        String::from_utf8_lossy(&all[from..]).into_owned()
    }

    pub fn url(&self, name: &str) -> String {
        format!("{}/v1/stream/{name}", self.base)
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill_9(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
pub mod fleet;
pub mod product;

/// A server run in this process until its stop sender fires (or drops).
pub struct Running {
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Runs `server` on a task of its own; see [`Running`].
pub fn run_in_process(server: strata_server::cli::serve::Server) -> Running {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async {
                let _ = stopped.await;
            })
            .await
            .expect("the server runs");
    });
    Running { stop, task }
}

/// Waits (checking every 50 ms, at most 10 s) until `holds` is true; panics
/// naming `what` otherwise. For effects the server shows only in its
/// answers and its log (a signal's, say).
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, holds: impl Fn() -> F) {
    assert!(
        holds_within(Duration::from_secs(10), holds).await,
        "never happened: {what}"
    );
}

/// Whether `holds` becomes true within `longest` (checked every 50 ms).
pub async fn holds_within<F: std::future::Future<Output = bool>>(
    longest: Duration,
    holds: impl Fn() -> F,
) -> bool {
    let checks = (longest.as_millis() / 50).max(1);
    for _ in 0..checks {
        if holds().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Sends `SIGHUP` to a server (it reloads its tokens and limits files).
pub fn hangup(server: &Server) {
    let pid = libc::pid_t::try_from(server.child.id()).expect("a pid");
    // SAFETY: signalling a child process the test owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
}
