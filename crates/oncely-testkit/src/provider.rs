//! A fake outside provider for tests and examples: a real HTTP/1.1 server on 127.0.0.1 that
//! behaves like an email or payment API which deduplicates by the `Idempotency-Key` header,
//! and counts the side effects it really performed, per key.
//!
//! - `POST /effects` with `Idempotency-Key: K` and a body: performs the side effect once per
//!   key and answers `200 {"id":"ref-N","replayed":false}`; a repeat of `K` answers the same
//!   reference with `"replayed":true` and performs nothing.
//! - `GET /effects/K`: `200 {"id":"ref-N"}` if `K` was performed, else `404`.
//!
//! Faults: [`FakeProvider::without_dedup`] (a provider that ignores the key, to show a checker
//! can fail) and [`FakeProvider::drop_response_once`] (performs, then closes the connection
//! without answering, as a network failure after the fact).

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// One side effect the provider performed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideEffect {
    /// The `Idempotency-Key` it was performed under, if any.
    pub key: Option<String>,
    /// The request body.
    pub body: Vec<u8>,
    /// The reference the provider answered.
    pub reference: String,
}

#[derive(Default)]
struct State {
    dedup: bool,
    requests: u64,
    performed: Vec<SideEffect>,
    by_key: BTreeMap<String, String>,
    drop_once: HashSet<String>,
}

/// The fake provider; dropping it stops the server.
pub struct FakeProvider {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeProvider {
    /// Starts a deduplicating provider on an ephemeral port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(true).await
    }

    /// Starts a provider that ignores `Idempotency-Key`: every request performs the effect.
    pub async fn without_dedup() -> io::Result<Self> {
        Self::start_with(false).await
    }

    async fn start_with(dedup: bool) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            dedup,
            ..State::default()
        }));
        let stop = CancellationToken::new();
        let (st, stop2) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop2.cancelled() => return,
                    accepted = listener.accept() => {
                        if let Ok((socket, _)) = accepted {
                            tokio::spawn(serve(socket, st.clone()));
                        }
                    }
                }
            }
        });
        Ok(Self { addr, state, stop })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// For `key`'s next request: perform the effect, then drop the connection unanswered.
    pub fn drop_response_once(&self, key: &str) {
        self.lock().drop_once.insert(key.to_owned());
    }

    /// HTTP requests received (all paths).
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// Every side effect performed, in order.
    pub fn performed(&self) -> Vec<SideEffect> {
        self.lock().performed.clone()
    }

    /// Side effects performed per key.
    pub fn effects_per_key(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for e in &self.lock().performed {
            if let Some(k) = &e.key {
                *counts.entry(k.clone()).or_insert(0) += 1;
            }
        }
        counts
    }
}

struct Request {
    method: String,
    path: String,
    key: Option<String>,
    body: Vec<u8>,
}

async fn read_request(socket: &mut TcpStream) -> io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            return Err(io::Error::other("request head too large"));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_owned();
    let path = first.next().unwrap_or("").to_owned();
    let (mut key, mut length) = (None, 0usize);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("idempotency-key") {
                key = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or(0);
            }
        }
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Request {
        method,
        path,
        key,
        body,
    }))
}

/// What to answer: status and JSON body, or `None` to drop the connection.
fn handle(state: &Mutex<State>, req: Request) -> Option<(u16, String)> {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    s.requests += 1;
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/effects") => {
            if s.dedup
                && let Some(reference) = req.key.as_ref().and_then(|k| s.by_key.get(k))
            {
                return Some((200, format!(r#"{{"id":"{reference}","replayed":true}}"#)));
            }
            let reference = format!("ref-{}", s.performed.len() + 1);
            s.performed.push(SideEffect {
                key: req.key.clone(),
                body: req.body,
                reference: reference.clone(),
            });
            if let Some(k) = &req.key {
                s.by_key
                    .entry(k.clone())
                    .or_insert_with(|| reference.clone());
                if s.drop_once.remove(k) {
                    return None;
                }
            }
            Some((200, format!(r#"{{"id":"{reference}","replayed":false}}"#)))
        }
        ("GET", path) if path.starts_with("/effects/") => {
            match s.by_key.get(&path["/effects/".len()..]) {
                Some(reference) => Some((200, format!(r#"{{"id":"{reference}"}}"#))),
                None => Some((404, r#"{"error":"unknown key"}"#.to_owned())),
            }
        }
        _ => Some((404, r#"{"error":"no such route"}"#.to_owned())),
    }
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) {
    let Ok(Some(req)) = read_request(&mut socket).await else {
        return;
    };
    let Some((status, body)) = handle(&state, req) else {
        return; // dropped: the effect happened, the client sees a broken connection
    };
    let reason = if status == 200 { "OK" } else { "Not Found" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}
