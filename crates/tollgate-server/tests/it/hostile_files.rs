//! Config files that are not what they claim to be, end to end through the
//! real binary: a device, a FIFO, an oversized file, text that would drive
//! the operator's terminal, a TOML file nested thousands deep. Each must
//! end in a prompt, clear refusal, never a hang, a flood of lines or memory
//! that grows until the machine runs out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support;

const CONFIG: &str =
    "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\n";

/// A hang guard, not a speed bound: the inputs here once made a command
/// block or read forever, and any finite wait tells that apart. It must
/// only ever catch that: the deepest file below costs a debug build about
/// 2.3 s of CPU (linear in its 9 MB), which a machine whose two cores
/// run a dozen other tests stretches past 20 s of wall time.
const LIMIT: Duration = Duration::from_secs(120);

fn tollgate(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.current_dir(dir).args(args);
    support::output_within(cmd, b"", LIMIT)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo (coreutils) runs");
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

/// Every way of naming a file that is not a regular one, for each command
/// that reads a config: exit 1, promptly, naming the file and why.
#[test]
fn devices_and_fifos_are_refused_without_blocking_or_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ok.toml"), CONFIG).expect("write");
    fifo(dir.path(), "pipe.toml");
    fifo(dir.path(), "pipe.yaml");
    let cases: &[(&[&str], &str)] = &[
        (&["validate", "--config", "/dev/zero"], "/dev/zero"),
        (&["validate", "--config", "/dev/urandom"], "/dev/urandom"),
        (&["validate", "--config", "pipe.toml"], "pipe.toml"),
        (
            &[
                "validate",
                "--config",
                "ok.toml",
                "--envoy-config",
                "pipe.yaml",
            ],
            "pipe.yaml",
        ),
        (
            &[
                "validate",
                "--config",
                "ok.toml",
                "--envoy-config",
                "/dev/zero",
            ],
            "/dev/zero",
        ),
        (&["serve", "--config", "/dev/zero"], "/dev/zero"),
        (&["serve", "--config", "pipe.toml"], "pipe.toml"),
        (
            &[
                "serve",
                "--config",
                "ok.toml",
                "--grpc",
                "127.0.0.1:0",
                "--envoy-config",
                "pipe.yaml",
            ],
            "pipe.yaml",
        ),
        (
            &["replay", "--config", "/dev/zero", "--trace", "-"],
            "/dev/zero",
        ),
    ];
    for (args, file) in cases {
        let out = tollgate(dir.path(), args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{file}: cannot read: not a regular file")),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_config_over_the_size_cap_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big)
        .expect("create")
        .set_len(tollgate_server::config::file::MAX_FILE_BYTES + 1)
        .expect("grow");
    let out = tollgate(dir.path(), &["validate", "--config", "big.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("big.toml: the file is larger than 16 MiB"),
        "{}",
        stderr(&out)
    );
}

/// Bytes that a terminal acts on: ESC (colours, cursor moves, window
/// titles), CR (overprints the line), NUL, a bidirectional override.
fn assert_inert(text: &str, what: &str) {
    for c in text.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{what} holds {c:?} raw:\n{text:?}"
        );
    }
}

#[test]
fn text_from_the_files_reaches_the_terminal_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ok.toml"), CONFIG).expect("write");
    // An unknown YAML key and an unknown TOML key, each with an escape
    // sequence, a CR, a NUL and a bidirectional override.
    std::fs::write(
        dir.path().join("bad.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    \"\\e[31mred\\r\\0\\u202e\": 1\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("bad.toml"),
        "\"\\u001b]0;title\\u0007\\r\\u0000\" = 1\n",
    )
    .expect("write");
    let out = tollgate(
        dir.path(),
        &[
            "validate",
            "--config",
            "ok.toml",
            "--envoy-config",
            "bad.yaml",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_inert(&err, "stderr");
    assert!(
        err.contains("bad.yaml:4: descriptors[0].\\u{1b}[31mred\\r\\0\\u{202e}: unknown field"),
        "{err}"
    );
    let out = tollgate(dir.path(), &["validate", "--config", "bad.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_inert(&err, "stderr");
    assert!(
        err.contains("bad.toml:1: \\u{1b}]0;title\\u{7}\\r\\0: unknown field"),
        "{err}"
    );

    // A valid Envoy file whose domain and values hold them: the summary on
    // stdout shows them escaped.
    std::fs::write(
        dir.path().join("ok.yaml"),
        "domain: \"d\\e[2J\"\ndescriptors:\n  - key: k\n    value: \"v\\r\\e]0;t\\a\"\n    \
         rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .expect("write");
    let out = tollgate(
        dir.path(),
        &[
            "validate",
            "--config",
            "ok.toml",
            "--envoy-config",
            "ok.yaml",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary = String::from_utf8(out.stdout).expect("utf-8");
    assert_inert(&summary, "the summary");
    assert!(summary.contains("envoy domain d\\u{1b}[2J"), "{summary}");
    assert!(summary.contains("k_v\\r\\u{1b}]0;t\\u{7}"), "{summary}");
}

#[test]
fn a_toml_file_nested_thousands_deep_is_one_error_at_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let deep: String = (1..=3000)
        .map(|depth| format!("[{}]\n", vec!["a"; depth].join(".")))
        .collect();
    std::fs::write(dir.path().join("deep.toml"), deep).expect("write");
    let out = tollgate(dir.path(), &["validate", "--config", "deep.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "deep.toml:81: TOML syntax error: recursion limit\ndeep.toml: invalid, 1 problem\n"
    );
}
