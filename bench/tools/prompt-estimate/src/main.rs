//! How good is `estimate = "prompt"`? Builds OpenAI chat request bodies
//! from a varied corpus — English prose (docs/), Rust code, JSON files of
//! the repository, and texts in nine other languages plus emoji
//! (bench/tools/prompt-estimate/corpus/) — cut into prompts of several
//! sizes, serialized as UTF-8 and as ASCII with `\uXXXX` escapes (what
//! Python's `json.dumps` writes by default), and compares the proxy's
//! estimate (`tollgate_http::estimate::prompt_tokens` of the body) with
//! the prompt tokens o200k_base and cl100k_base count (3 per message and
//! 3 to prime the answer added, as OpenAI's cookbook counts chat prompts).
//!
//! Prints, per class of text, tokenizer and encoding, the ratio
//! estimate / true: min, median, max. Run from the repository's root:
//! `cargo run --release -p prompt-estimate` (bench/README.md keeps the
//! figures).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use tiktoken_rs::CoreBPE;
use tollgate_http::estimate::prompt_tokens;
use tollgate_http::request_body::TextCount;

/// Prompt sizes cut from each file, in characters (about).
const SIZES: [usize; 3] = [300, 2_000, 12_000];

const SYSTEM: &str = "You are a helpful assistant.";

fn main() {
    let root = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let classes = [
        ("English prose (docs/*.md)", files(&root.join("docs"), "md")),
        (
            "Rust code (crates/tollgate/src)",
            files(&root.join("crates/tollgate/src"), "rs"),
        ),
        (
            "JSON (openapi, dashboard, schema)",
            vec![
                root.join("crates/tollgate-server/openapi.json"),
                root.join("deploy/grafana/tollgate.json"),
                root.join("deploy/helm/tollgate/values.schema.json"),
            ],
        ),
        (
            "European languages (de fr es ru)",
            corpus(&root, &["de", "fr", "es", "ru"]),
        ),
        ("CJK (zh ja ko)", corpus(&root, &["zh", "ja", "ko"])),
        ("Arabic, Hindi", corpus(&root, &["ar", "hi"])),
        ("Emoji and symbols", corpus(&root, &["mixed"])),
    ];
    let tokenizers = [
        ("o200k_base", tiktoken_rs::o200k_base().expect("o200k_base")),
        (
            "cl100k_base",
            tiktoken_rs::cl100k_base().expect("cl100k_base"),
        ),
    ];
    // The table is written once, at the end (the workspace forbids
    // `println!`: a library must not write to stdout by accident).
    let mut out = String::new();
    out.push_str(
        "| text | prompts | tokenizer | body | body bytes per token | min | median | max |\n",
    );
    out.push_str("|---|---:|---|---|---:|---:|---:|---:|\n");
    let mut every = Vec::new();
    for (class, paths) in &classes {
        let prompts = prompts(paths);
        for (name, bpe) in &tokenizers {
            for ascii in [false, true] {
                let measured: Vec<Measure> =
                    prompts.iter().map(|p| measure(bpe, p, ascii)).collect();
                let bytes: usize = measured.iter().map(|m| m.bytes).sum();
                let tokens: usize = measured.iter().map(|m| m.truth).sum();
                let mut ratios: Vec<f64> = measured
                    .iter()
                    .map(|m| m.estimate as f64 / m.truth as f64)
                    .collect();
                every.extend(&ratios);
                ratios.sort_by(f64::total_cmp);
                let body = if ascii { "\\u escaped" } else { "UTF-8" };
                let _ = writeln!(
                    out,
                    "| {class} | {} | {name} | {body} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    ratios.len(),
                    bytes as f64 / tokens as f64,
                    ratios[0],
                    ratios[ratios.len() / 2],
                    ratios[ratios.len() - 1]
                );
            }
        }
    }
    every.sort_by(f64::total_cmp);
    let under = every.iter().filter(|&&r| r < 1.0).count();
    let _ = writeln!(
        out,
        "\nall {} measurements: min {:.2}, median {:.2}, max {:.2}; under 1 (under-reserved): {under}",
        every.len(),
        every[0],
        every[every.len() / 2],
        every[every.len() - 1]
    );
    std::io::stdout()
        .write_all(out.as_bytes())
        .expect("write stdout");
}

/// The files under `dir` ending in `.ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let entries = fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn corpus(root: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| root.join(format!("bench/tools/prompt-estimate/corpus/{n}.txt")))
        .collect()
}

/// Each file cut into prompts of each of [`SIZES`] at line ends; a file
/// shorter than a size is one prompt of it.
fn prompts(paths: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for path in paths {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for size in SIZES {
            let mut piece = String::new();
            for line in text.split_inclusive('\n') {
                piece.push_str(line);
                if piece.chars().count() >= size {
                    out.push(std::mem::take(&mut piece));
                }
            }
            if !piece.trim().is_empty() {
                out.push(piece);
            }
        }
    }
    out.retain(|p| !p.trim().is_empty());
    out.dedup();
    out
}

/// One chat request measured.
struct Measure {
    /// The body's length.
    bytes: usize,
    /// The proxy's estimate.
    estimate: u64,
    /// The prompt tokens the tokenizer counts.
    truth: usize,
}

/// A chat request asking `prompt`, estimated and counted.
fn measure(bpe: &CoreBPE, prompt: &str, ascii: bool) -> Measure {
    let body = serde_json::json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": prompt},
        ],
        "max_tokens": 512,
    })
    .to_string();
    let body = if ascii { escape_non_ascii(&body) } else { body };
    let mut text = TextCount::default();
    text.push(body.as_bytes());
    let estimate = prompt_tokens(text);
    let count = |s: &str| bpe.encode_with_special_tokens(s).len();
    // 3 per message, 3 priming the answer.
    let truth = count(SYSTEM) + count(prompt) + 2 * 3 + 3;
    Measure {
        bytes: body.len(),
        estimate,
        truth,
    }
}

/// `json` with every non-ASCII character as a `\uXXXX` escape (two for
/// one outside the BMP), as Python's `json.dumps` writes by default.
fn escape_non_ascii(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}
