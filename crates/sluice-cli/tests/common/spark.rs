//! A Spark session of the tests' Python clients (tests/clients/spark_*.py),
//! started once and driven over stdin/stdout: one JSON command per line in,
//! one JSON answer per line out (Spark's own logging goes to stderr).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

/// How long one Spark command may take on a loaded 2-core machine (the
/// first may resolve jars through ivy).
const COMMAND_TIME: Duration = Duration::from_secs(300);

/// The session: killed when dropped.
pub struct Session {
    child: Child,
    input: ChildStdin,
    answers: Receiver<String>,
}

impl Session {
    /// `python SCRIPT ARGS…`, once it says it is ready.
    pub fn start(python: &str, script: &str, args: &[&std::ffi::OsStr]) -> Session {
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python runs");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let (send, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in output.lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut session = Session {
            child,
            input,
            answers,
        };
        let ready = session.answer();
        assert_eq!(ready["ok"], true, "Spark did not start: {ready}");
        session
    }

    fn answer(&mut self) -> Value {
        let line = self
            .answers
            .recv_timeout(COMMAND_TIME)
            .expect("Spark answers within its time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Runs `command`; its answer, which must be a success.
    pub fn call(&mut self, command: Value) -> Value {
        writeln!(self.input, "{command}").unwrap();
        self.input.flush().unwrap();
        let answer = self.answer();
        assert_eq!(answer["ok"], true, "{command}: {answer}");
        answer
    }

    /// Runs a SQL statement; the first value of its first row, if any.
    pub fn sql(&mut self, sql: &str) -> Value {
        self.call(json!({"op": "sql", "sql": sql}))["first"].clone()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
