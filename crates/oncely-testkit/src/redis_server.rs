//! `redis-server` processes of a test's or a bench's own (own port, own directory), for
//! server settings the machine's shared Redis must not be given: AOF with
//! `appendfsync always`, a replica, an evicting policy. The process is killed when the handle
//! is dropped.
//!
//! ```no_run
//! use oncely_testkit::redis_server::RedisServer;
//!
//! # async fn example() {
//! let aof = match RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]).await {
//!     Ok(server) => server,
//!     Err(e) if RedisServer::is_missing(&e) => {
//!         oncely_testkit::services::unavailable("my_test", "redis-server binary", &e);
//!         return;
//!     }
//!     Err(e) => panic!("{e}"),
//! };
//! let url = aof.url(0); // redis://127.0.0.1:<port>/0
//! # let _ = url; }
//! ```

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`RedisServer::start`] waits for the server to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process on a free loopback port, with a temporary directory (its
/// AOF and RDB files) removed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl RedisServer {
    /// Starts `redis-server --port <free> --bind 127.0.0.1 --save "" --dir <tmp>` plus `args`
    /// and waits until it answers `PING`. A missing binary is an error for which
    /// [`is_missing`](Self::is_missing) holds; a server that does not answer within
    /// [`START_TIMEOUT`] is a `TimedOut` error.
    pub async fn start(args: &[&str]) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if server.command(&["PING"]).is_ok_and(|r| r.contains("PONG")) {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("redis-server on port {port} did not answer within {START_TIMEOUT:?}"),
        ))
    }

    /// Starts a replica of `primary` (`--replicaof 127.0.0.1 <port>`) and waits until the
    /// primary reports it online (its first sync done), so `WAIT 1` answers at once.
    pub async fn start_replica_of(primary: &RedisServer) -> io::Result<Self> {
        let port = primary.port.to_string();
        let replica = Self::start(&["--replicaof", "127.0.0.1", &port]).await?;
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            let info = primary.command(&["INFO", "replication"])?;
            if info.contains("state=online") {
                return Ok(replica);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the replica of port {port} was not online within {START_TIMEOUT:?}"),
        ))
    }

    /// Whether a [`start`](Self::start) error means the `redis-server` binary is not there
    /// (a skip, or a failure under CI), rather than a server that failed.
    pub fn is_missing(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::NotFound
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Sends one command (RESP) and returns the raw reply, for the few checks a test makes
    /// without a Redis client (`PING`, `INFO replication`).
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut request = format!("*{}\r\n", args.len());
        for a in args {
            request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf)?;
            reply.extend_from_slice(&buf[..n]);
            if n == 0 || complete(&reply) {
                return Ok(String::from_utf8_lossy(&reply).into_owned());
            }
        }
    }
}

/// Whether `reply` holds one whole simple, error, integer or bulk-string reply.
fn complete(reply: &[u8]) -> bool {
    let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if reply.first() != Some(&b'$') {
        return true;
    }
    let len: i64 = std::str::from_utf8(&reply[1..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    len < 0 || reply.len() >= end + 2 + len as usize + 2
}

#[cfg(test)]
mod tests {
    use super::complete;

    #[test]
    fn replies_are_read_whole() {
        assert!(complete(b"+PONG\r\n"));
        assert!(!complete(b"+PO"));
        assert!(complete(b"$-1\r\n"));
        assert!(!complete(b"$10\r\nabc"));
        assert!(complete(b"$3\r\nabc\r\n"));
    }
}
