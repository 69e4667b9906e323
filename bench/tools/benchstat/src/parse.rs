//! What the load tools and counters print, read into named figures: wrk,
//! oha, `grpc_load`, `key=value` lines (`redis_load`, `hybrid_bench`),
//! redis-benchmark's CSV, Redis's `INFO commandstats`, callgrind's output.
//!
//! Latencies come out in milliseconds; `n` is the requests answered and
//! `bad` how many of them were not a success (non-2xx, `OVER_LIMIT`).

use std::collections::BTreeMap;

/// Named figures of one run (numbers written out in full; `errors` is text).
pub(crate) type Fields = BTreeMap<String, String>;

/// The parsers `benchstat run --parse` knows.
pub(crate) const KINDS: &[&str] = &["wrk", "oha", "grpc-load", "kv", "redis-benchmark", "none"];

/// Reads the output of the load tool `kind`.
pub(crate) fn output(kind: &str, text: &str) -> Result<Fields, String> {
    match kind {
        "wrk" => wrk(text),
        "oha" => oha(text),
        "grpc-load" => grpc_load(text),
        "kv" => Ok(kv(text)),
        "redis-benchmark" => redis_benchmark(text),
        "none" => Ok(Fields::new()),
        _ => Err(format!(
            "unknown --parse {kind} (one of {})",
            KINDS.join(", ")
        )),
    }
}

fn put(f: &mut Fields, k: &str, v: f64) {
    f.insert(k.to_owned(), v.to_string());
}

/// A duration as wrk and tollgate's log write it (`812.00us`, `1.20ms`,
/// `1.01s`, `3m`, `950ns`, `7µs`), in milliseconds; a bare number is
/// taken as milliseconds.
pub(crate) fn millis(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "" | "ms" => 1.0,
        "ns" => 1e-6,
        "us" | "µs" => 1e-3,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(v * scale)
}

/// wrk with `--latency`: req/s, p50, p99, max latency, requests, non-2xx,
/// socket errors.
pub(crate) fn wrk(text: &str) -> Result<Fields, String> {
    let mut f = Fields::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["Requests/sec:", v, ..] => put(&mut f, "rps", v.parse().map_err(|_| "bad req/s")?),
            ["50%", v, ..] => put(&mut f, "p50", millis(v).ok_or("bad p50")?),
            ["99%", v, ..] => put(&mut f, "p99", millis(v).ok_or("bad p99")?),
            ["Latency", _avg, _dev, max, ..] => {
                if let Some(m) = millis(max) {
                    put(&mut f, "max", m);
                }
            }
            [n, "requests", "in", ..] => put(&mut f, "n", n.parse().map_err(|_| "bad count")?),
            ["Non-2xx", "or", "3xx", "responses:", v] => {
                put(&mut f, "bad", v.parse().map_err(|_| "bad non-2xx")?);
            }
            _ => {}
        }
        if let Some((_, e)) = line.split_once("Socket errors: ") {
            f.insert("errors".into(), e.trim().to_owned());
        }
    }
    f.entry("bad".into()).or_insert_with(|| "0".into());
    need(&f, &["rps", "n", "p50", "p99"], "wrk")?;
    Ok(f)
}

/// oha's `--output-format json`.
pub(crate) fn oha(text: &str) -> Result<Fields, String> {
    let d: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("oha: {e}"))?;
    let num = |v: &serde_json::Value| v.as_f64().ok_or("oha: a figure is missing");
    let mut f = Fields::new();
    put(&mut f, "rps", num(&d["summary"]["requestsPerSec"])?);
    put(&mut f, "p50", 1e3 * num(&d["latencyPercentiles"]["p50"])?);
    put(&mut f, "p99", 1e3 * num(&d["latencyPercentiles"]["p99"])?);
    let (mut n, mut bad) = (0.0, 0.0);
    if let Some(codes) = d["statusCodeDistribution"].as_object() {
        for (code, count) in codes {
            let c = count.as_f64().unwrap_or(0.0);
            n += c;
            if !code.starts_with('2') {
                bad += c;
            }
        }
    }
    put(&mut f, "n", n);
    put(&mut f, "bad", bad);
    Ok(f)
}

/// `grpc_load`'s line: `requests N in Xs: R req/s, over_limit P%, p50 A ms,
/// p99 B ms, admitted K`; `bad` is the calls answered `OVER_LIMIT`.
pub(crate) fn grpc_load(text: &str) -> Result<Fields, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("requests "))
        .ok_or("grpc_load printed no result")?;
    let w: Vec<&str> = line.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    let after = |word: &str| -> Result<f64, String> {
        let i = w
            .iter()
            .position(|x| *x == word)
            .ok_or(format!("grpc_load: no {word}"))?;
        w.get(i + 1)
            .and_then(|v| v.trim_end_matches('%').parse().ok())
            .ok_or(format!("grpc_load: bad {word}"))
    };
    let (n, admitted) = (after("requests")?, after("admitted")?);
    let mut f = Fields::new();
    put(&mut f, "n", n);
    put(
        &mut f,
        "rps",
        w.get(4)
            .and_then(|v| v.parse().ok())
            .ok_or("grpc_load: bad req/s")?,
    );
    put(&mut f, "p50", after("p50")?);
    put(&mut f, "p99", after("p99")?);
    put(&mut f, "admitted", admitted);
    put(&mut f, "bad", n - admitted);
    Ok(f)
}

/// Every `key=value` word whose value is a number (`checks=1000 rps=99.5`).
pub(crate) fn kv(text: &str) -> Fields {
    let mut f = Fields::new();
    for word in text.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            let v = v.trim_end_matches([',', ';']);
            if !k.is_empty() && v.parse::<f64>().is_ok() {
                f.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    f
}

/// redis-benchmark `--csv`: the requests/s of its last test.
pub(crate) fn redis_benchmark(text: &str) -> Result<Fields, String> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(','))
        .ok_or("redis-benchmark printed no CSV")?;
    let rps = line
        .split(',')
        .nth(1)
        .and_then(|v| v.trim().trim_matches('"').parse().ok())
        .ok_or("redis-benchmark: bad requests/s")?;
    let mut f = Fields::new();
    put(&mut f, "rps", rps);
    Ok(f)
}

fn need(f: &Fields, keys: &[&str], tool: &str) -> Result<(), String> {
    match keys.iter().find(|k| !f.contains_key(**k)) {
        Some(k) => Err(format!("no {k} in {tool}'s output")),
        None => Ok(()),
    }
}

/// Calls and µs of the commands `names` (`evalsha`, `fcall`...) in the
/// text of Redis's `INFO commandstats`.
pub(crate) fn commandstats(text: &str, names: &[String]) -> (u64, u64) {
    let (mut calls, mut usec) = (0, 0);
    for line in text.lines() {
        let Some((name, rest)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            continue;
        }
        for kv in rest.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls += v.parse::<u64>().unwrap_or(0),
                Some(("usec", v)) => usec += v.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
    (calls, usec)
}

/// The events callgrind counted (its first event, Ir by default) in the
/// text of a `callgrind.out` file (its `summary:` or `totals:` line).
pub(crate) fn callgrind_total(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l
            .strip_prefix("summary:")
            .or_else(|| l.strip_prefix("totals:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 6s test @ http://127.0.0.1:1234
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.02ms    1.30ms  21.02ms   91.00%
    Req/Sec    33.10k     2.01k   38.00k    70.00%
  Latency Distribution
     50%  812.00us
     75%    1.20ms
     90%    2.00ms
     99%    8.31ms
  397260 requests in 6.00s, 97.37MB read
  Socket errors: connect 0, read 2, write 0, timeout 0
  Non-2xx or 3xx responses: 1000
Requests/sec:  66176.03
Transfer/sec:     16.22MB
";

    fn num(f: &Fields, k: &str) -> f64 {
        f[k].parse().unwrap()
    }

    #[test]
    fn wrk_output_gives_its_figures_in_milliseconds() {
        let f = wrk(WRK).unwrap();
        assert_eq!(num(&f, "rps"), 66176.03);
        assert!((num(&f, "p50") - 0.812).abs() < 1e-12);
        assert_eq!(num(&f, "p99"), 8.31);
        assert_eq!(num(&f, "max"), 21.02);
        assert_eq!(num(&f, "n"), 397_260.0);
        assert_eq!(num(&f, "bad"), 1000.0);
        assert_eq!(f["errors"], "connect 0, read 2, write 0, timeout 0");
    }

    #[test]
    fn wrk_output_without_a_result_is_an_error() {
        assert!(wrk("unable to connect to 127.0.0.1:1 Connection refused\n").is_err());
    }

    #[test]
    fn durations_of_every_unit_are_milliseconds() {
        assert_eq!(millis("1.01s"), Some(1010.0));
        assert_eq!(millis("7µs"), Some(0.007));
        assert_eq!(millis("950ns"), Some(0.00095));
        assert_eq!(millis("2.5"), Some(2.5));
        assert_eq!(millis("3 parsecs"), None);
    }

    #[test]
    fn oha_json_counts_non_2xx_answers() {
        let json = r#"{"summary":{"requestsPerSec":1999.5},"latencyPercentiles":{"p50":0.000148,"p99":0.000337},
                      "statusCodeDistribution":{"200":9990,"429":10}}"#;
        let f = oha(json).unwrap();
        assert_eq!(num(&f, "rps"), 1999.5);
        assert!((num(&f, "p99") - 0.337).abs() < 1e-9);
        assert_eq!((num(&f, "n"), num(&f, "bad")), (10_000.0, 10.0));
    }

    #[test]
    fn the_grpc_load_line_gives_denied_calls() {
        let line = "requests 288135 in 5.00s: 57627 req/s, over_limit 0.0%, p50 1.025 ms, p99 2.381 ms, admitted 288000\n";
        let f = grpc_load(line).unwrap();
        assert_eq!(num(&f, "n"), 288_135.0);
        assert_eq!(num(&f, "rps"), 57627.0);
        assert_eq!((num(&f, "p50"), num(&f, "p99")), (1.025, 2.381));
        assert_eq!(num(&f, "bad"), 135.0);
    }

    #[test]
    fn key_value_words_are_taken_when_their_value_is_a_number() {
        let f = kv(
            "tollgate_redis checks=1000 rps=231546 client_cpu_us_per_check=0.68 (user 0.31 + sys 0.37) a=b",
        );
        assert_eq!(f.len(), 3);
        assert_eq!(f["client_cpu_us_per_check"], "0.68");
    }

    #[test]
    fn redis_benchmark_csv_gives_the_last_tests_rate() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"EVALSHA x\",\"79010.00\",\"0.7\"\n";
        assert_eq!(num(&redis_benchmark(csv).unwrap(), "rps"), 79010.0);
    }

    #[test]
    fn commandstats_sums_the_named_commands() {
        let info = "# Commandstats\r\ncmdstat_fcall:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0\r\n\
                    cmdstat_evalsha:calls=5,usec=50,usec_per_call=10.00\r\ncmdstat_get:calls=99,usec=9\r\n";
        let names = ["fcall".to_owned(), "evalsha".to_owned(), "eval".to_owned()];
        assert_eq!(commandstats(info, &names), (15, 300));
    }

    #[test]
    fn callgrind_totals_are_its_summary_line() {
        let out = "version: 1\ncmd: x\nevents: Ir\nsummary: 123456\nfl=a\n";
        assert_eq!(callgrind_total(out), Some(123_456));
        assert_eq!(callgrind_total("events: Ir\ntotals: 77 3\n"), Some(77));
        assert_eq!(callgrind_total("events: Ir\n"), None);
    }
}
