//! `oncely console` after `oncely demo --store sqlite:…`: the pages and the API serve, and
//! every count the API answers equals the database's own; a non-loopback address without a
//! token is refused.

mod admin_support;
use admin_support::{Target, oncely};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn console_serves_the_demo_database_with_its_own_counts() {
    let t = Target::sqlite();
    t.seed_with_demo(300);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _serving = Serving(
        Command::new(env!("CARGO_BIN_EXE_oncely"))
            .args(["console", "--database", &t.url, "--addr", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let mut up = false;
    for _ in 0..100 {
        if http.get(format!("{base}/api/csrf")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "oncely console did not come up on {addr}");
    for page in ["/", "/dead-letters", "/audit"] {
        let r = http.get(format!("{base}{page}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{page}");
        assert!(r.text().await.unwrap().contains("oncely console"));
    }
    let o: Value = http
        .get(format!("{base}/api/overview"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let inbox = t
        .scalar(&format!("SELECT COUNT(*) FROM {}", t.table("inbox")))
        .await;
    let dead = t
        .scalar(&format!("SELECT COUNT(*) FROM {}", t.table("dead_letters")))
        .await;
    assert!(dead > 0, "the demo leaves dead letters");
    assert_eq!(o["stats"]["ids_held"], inbox);
    assert_eq!(o["stats"]["dead_letters"], dead);
    for g in o["groups"].as_array().unwrap() {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE consumer = '{}' AND reason = '{}'",
            t.table("dead_letters"),
            g["consumer"].as_str().unwrap(),
            g["reason"].as_str().unwrap()
        );
        assert_eq!(g["rows"], t.scalar(&sql).await, "{g}");
    }
    let l: Value = http
        .get(format!("{base}/api/dead-letters?limit=5"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(l["total"], dead);
    assert_eq!(l["rows"].as_array().unwrap().len() as i64, dead.min(5));
    let conflicts = t
        .scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE reason = 'conflict'",
            t.table("dead_letters")
        ))
        .await;
    let l: Value = http
        .get(format!("{base}/api/dead-letters?reason=conflict"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(l["total"], conflicts);
}

#[test]
fn console_refuses_a_public_address_without_a_token() {
    let t = Target::sqlite();
    let (code, _, stderr) = oncely(&["console", "--database", &t.url, "--addr", "0.0.0.0:0"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}
