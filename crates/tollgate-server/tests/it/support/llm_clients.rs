//! The real LLM clients and the model server nobody here wrote, for the
//! proxy's end-to-end tests: `tests/python/llm_clients.py` drives the
//! official `openai` and `anthropic` SDKs (one JSON line per call), and
//! [`Llmock`] runs PyPI's `llmock`, an OpenAI- and Anthropic-compatible
//! mock server that reports usage in its answers (streamed ones too, with
//! `stream_options.include_usage`). All three are pinned in
//! scripts/install-deps.sh; as with Envoy, no test skips when they are
//! missing: it fails with the install command.
//!
//! Why llmock: of the OpenAI-compatible mock servers on PyPI looked at
//! (mockllm, fakellm, stubllm, mock-ai-api, llmock), it is the one that
//! sends the usage chunk `stream_options.include_usage` asks for; it is
//! maintained (five releases, the last of autumn 2026); it serves every
//! API the gateway meters (chat completions, the responses API,
//! Anthropic's messages) with usage in the JSON and in the streams; and it
//! can cut streams on purpose (`--stream-fault`) for the dropped-stream
//! cases.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How to install the clients and the mock server.
pub const SDK_INSTALL: &str = "pip install openai==3.63.0 anthropic==2.17.0 llmock==0.2.2 \
     (or: bash scripts/install-deps.sh)";

/// What one SDK call gave: the usage it parsed, or the status it failed
/// with.
#[derive(Debug, Clone)]
pub struct Call {
    /// The case (`openai-chat-stream:async`, ...) or the swarm's API.
    pub case: String,
    /// Its position: the case's index, or the swarm's sequence number.
    pub seq: u64,
    /// Whether the SDK got and parsed an answer.
    pub ok: bool,
    /// The HTTP status (200 when ok; `None` when no answer came).
    pub status: Option<u16>,
    /// Input, output and total tokens as the SDK read them.
    pub usage: Option<Usage>,
    /// The text the SDK assembled.
    pub text: String,
    /// The line as printed.
    pub raw: serde_json::Value,
}

/// Token counts as an SDK parsed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Total tokens.
    pub total: u64,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/llm_clients.py")
}

fn parse(line: &str) -> Call {
    let raw: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("llm_clients.py printed {line:?}: {e}"));
    if let Some(e) = raw.get("import_error") {
        panic!("the LLM SDKs are not installed ({e}); install them with: {SDK_INSTALL}");
    }
    let usage = raw.get("usage").filter(|u| !u.is_null()).map(|u| Usage {
        input: u["input"].as_u64().expect("input"),
        output: u["output"].as_u64().expect("output"),
        total: u["total"].as_u64().expect("total"),
    });
    Call {
        case: raw["case"].as_str().unwrap_or_default().to_owned(),
        seq: raw["seq"].as_u64().expect("seq"),
        ok: raw["ok"].as_bool().expect("ok"),
        status: raw["status"]
            .as_u64()
            .map(|s| u16::try_from(s).expect("status")),
        usage,
        text: raw["text"].as_str().unwrap_or_default().to_owned(),
        raw,
    }
}

/// Where the clients go, and with what.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// Proxy URLs (`http://127.0.0.1:PORT`); call i goes to URL i mod n.
    pub bases: Vec<String>,
    /// A CA file the SDKs trust (for a TLS listener).
    pub ca: Option<PathBuf>,
    /// Headers sent with every call.
    pub headers: Vec<(String, String)>,
    /// A path prefix for the Anthropic client (`/anthropic` for llmock).
    pub anthropic_path: String,
}

impl Target {
    /// Every proxy of `bases`, with header `x-team: team`.
    pub fn new(bases: Vec<String>, team: &str) -> Target {
        Target {
            bases,
            headers: vec![("x-team".to_owned(), team.to_owned())],
            ..Target::default()
        }
    }

    fn args(&self, cmd: &str) -> Vec<String> {
        let mut args = vec![script().display().to_string(), cmd.to_owned()];
        for b in &self.bases {
            args.extend(["--base-url".to_owned(), b.clone()]);
        }
        if let Some(ca) = &self.ca {
            args.extend(["--ca".to_owned(), ca.display().to_string()]);
        }
        for (k, v) in &self.headers {
            args.extend(["--header".to_owned(), format!("{k}:{v}")]);
        }
        if !self.anthropic_path.is_empty() {
            args.extend(["--anthropic-path".to_owned(), self.anthropic_path.clone()]);
        }
        args
    }

    /// Runs `cases` one after the other (`openai-chat:sync`, ...).
    pub fn calls(&self, cases: &[String]) -> Vec<Call> {
        let mut args = self.args("calls");
        args.extend(cases.iter().cloned());
        run(&args)
    }

    /// Runs `requests` async calls of `api`, `concurrency` at a time.
    pub fn swarm(&self, api: &str, requests: u64, concurrency: u64) -> Vec<Call> {
        let mut args = self.args("swarm");
        args.extend([
            "--api".to_owned(),
            api.to_owned(),
            "--requests".to_owned(),
            requests.to_string(),
            "--concurrency".to_owned(),
            concurrency.to_string(),
        ]);
        let mut calls = run(&args);
        calls.sort_by_key(|c| c.seq);
        calls
    }
}

impl Target {
    /// A client process that makes one call at a time as the test asks
    /// ([`Session::call`]): the SDKs are imported once.
    pub fn session(&self) -> Session {
        let mut child = Command::new("python3")
            .args(self.args("serve"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}); install it and: {SDK_INSTALL}"));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Session {
            child,
            stdin,
            stdout,
        }
    }
}

/// A running `llm_clients.py serve`, ended on drop.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Session {
    /// Makes one call of `case` to the target's `base`-th URL.
    pub fn call(&mut self, case: &str, base: usize) -> Call {
        writeln!(self.stdin, "{case} {base}").expect("write to llm_clients.py");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .expect("read llm_clients.py");
        assert!(n > 0, "llm_clients.py serve ended (see its stderr above)");
        parse(&line)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(args: &[String]) -> Vec<Call> {
    let out = Command::new("python3")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}); install it and: {SDK_INSTALL}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let calls: Vec<Call> = stdout.lines().map(parse).collect();
    assert!(
        out.status.success(),
        "llm_clients.py {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    calls
}

/// Every SDK case: three APIs, streamed and not, sync and async.
pub fn all_cases() -> Vec<String> {
    let mut cases = Vec::new();
    for api in ["openai-chat", "openai-responses", "anthropic"] {
        for stream in ["", "-stream"] {
            for mode in ["sync", "async"] {
                cases.push(format!("{api}{stream}:{mode}"));
            }
        }
    }
    cases
}

/// The API of a case (`openai-chat-stream:async` → `openai-chat-stream`).
pub fn api_of(case: &str) -> &str {
    case.split(':').next().expect("a case")
}

/// PyPI's `llmock` serving on a free loopback port: OpenAI's API under
/// `/v1`, Anthropic's under `/anthropic/v1`; killed on drop.
pub struct Llmock {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Llmock {
    /// Starts it (port 0, text answers only, 2 ms between streamed
    /// chunks) and reads the port uvicorn bound from its log.
    pub fn start() -> Llmock {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import sys; from llmock.cli import app; sys.argv[0] = 'llmock'; app()",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--tool-mode",
                "off",
                // A pause between chunks, as a model generates: streams
                // overlap in the proxy.
                "--stream-chunk-delay-ms",
                "2",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}); install: {SDK_INSTALL}"));
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let marker = "Uvicorn running on http://";
        let mut log = String::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    if let Some(rest) = line.split(marker).nth(1) {
                        let addr = rest.split_whitespace().next().expect("address");
                        return Llmock {
                            child,
                            url: format!("http://{addr}"),
                        };
                    }
                    log.push_str(&line);
                    log.push('\n');
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("llmock did not start (install: {SDK_INSTALL}); log:\n{log}");
                }
            }
        }
    }
}

impl Drop for Llmock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
