//! A MinIO of a test's own, on a free loopback port, that the test can stop,
//! freeze (SIGSTOP) and start again without touching the suite's shared MinIO.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A MinIO of the test's own, on a free port, that can be stopped and started.
pub struct OwnMinio {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl OwnMinio {
    pub fn start() -> OwnMinio {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut minio = OwnMinio {
            dir: tempfile::tempdir().unwrap(),
            port,
            child: None,
        };
        minio.resume();
        minio
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn resume(&mut self) {
        let binary = std::env::var("SLUICE_TEST_MINIO").unwrap_or_else(|_| "minio".into());
        let child = Command::new(binary)
            .args([
                "server",
                self.dir.path().to_str().unwrap(),
                "--quiet",
                "--address",
            ])
            .arg(format!("127.0.0.1:{}", self.port))
            .args(["--console-address", "127.0.0.1:0"])
            .env(
                "MINIO_ROOT_USER",
                std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
            )
            .env(
                "MINIO_ROOT_PASSWORD",
                std::env::var("AWS_SECRET_ACCESS_KEY").unwrap(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start minio (on PATH, or SLUICE_TEST_MINIO)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let health = format!("{}/minio/health/live", self.endpoint());
        while Instant::now() < deadline {
            if health_ok(&health) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("MinIO did not come up on port {}", self.port);
    }

    /// Sends `signal` (STOP, CONT) to the MinIO process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnMinio {
    fn drop(&mut self) {
        self.stop();
    }
}

/// True when a GET of `url` answers 200 (std only, no runtime needed).
pub fn health_ok(url: &str) -> bool {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}
