//! `tollgate replay` end to end: the real binary on traces whose expected
//! decisions were worked out by hand from docs/semantics.md (the arithmetic is in
//! the comments; times in the comments are ms unless marked µs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

use crate::support;
use crate::support::{stderr, stdout};

const HEADER: &str = "t_ms,rule,key,cost,allowed,remaining,retry_after_ms,reset_after_ms";

/// One rule per algorithm, plus a GCRA / token bucket pair whose emission
/// interval is not a whole number of milliseconds (2.5 ms).
const CONFIG: &str = r#"
[[rules]]
name = "g"
algorithm = "gcra"
limit = 2
period = "1s"
burst = 4

[[rules]]
name = "tb"
algorithm = "token_bucket"
limit = 2
period = "1s"
burst = 4

[[rules]]
name = "g_fine"
algorithm = "gcra"
limit = 400
period = "1s"
burst = 1

[[rules]]
name = "tb_fine"
algorithm = "token_bucket"
limit = 400
period = "1s"
burst = 1

[[rules]]
name = "fw"
algorithm = "fixed_window"
limit = 3
period = "1s"

[[rules]]
name = "sw"
algorithm = "sliding_window"
limit = 4
period = "1s"

[[rules]]
name = "sl"
algorithm = "sliding_log"
limit = 4
period = "1s"
"#;

struct Run {
    dir: TempDir,
}

impl Run {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("tollgate.toml"), CONFIG).expect("write config");
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// Runs `tollgate replay` on `trace` with extra flags.
    fn replay(&self, trace: &str, extra: &[&str]) -> Output {
        let trace = self.write("trace.csv", trace);
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("replay")
            .arg("--config")
            .arg(self.path("tollgate.toml"))
            .arg("--trace")
            .arg(&trace)
            .args(extra)
            .output()
            .expect("run tollgate")
    }
}

/// Replays `input` rows (after the input header) and asserts the output
/// rows exactly.
fn assert_replay(input: &[&str], expected: &[&str]) {
    let run = Run::new();
    let trace = format!("t_ms,rule,key,cost\n{}\n", input.join("\n"));
    let out = run.replay(&trace, &[]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let want = format!("{HEADER}\n{}\n", expected.join("\n"));
    assert_eq!(stdout(&out), want);
}

// GCRA, rule g: limit 2 per 1s, burst 4.
//   T = period / limit = 500 ms; burst * T = 2000 ms.
//   tat = max(stored, t); new = tat + cost*T; allowed = new - t <= 2000
//   remaining = floor((2000 - (stored - t)) / 500); reset = stored - t
//   retry = new - 2000 - t (denied, cost <= 4)
const GCRA_IN: &[&str] = &[
    "0,RULE,a,1",    // tat 0, new 500: 500 <= 2000 admit; rem floor(1500/500)=3; reset 500
    "0,RULE,a,3",    // tat 500, new 2000: 2000 <= 2000 admit (burst > limit); rem 0; reset 2000
    "0,RULE,a,1",    // new 2500 > 2000 deny; retry 2500-2000-0 = 500; rem 0; reset 2000
    "0,RULE,a,5",    // cost 5 > burst 4: never; retry empty; rem 0; reset 2000
    "499,RULE,a,1", // new 2500, 2500-499 = 2001 > 2000 deny; retry 2500-2000-499 = 1; rem floor(499/500)=0; reset 1501
    "500,RULE,a,1", // 2500-500 = 2000 admit; tat 2500; rem 0; reset 2000
    "1700,RULE,a,0", // peek: tat 2500, 800 used; rem floor((2000-800)/500)=2; reset 800
    "1700,RULE,b,1", // fresh key: tat 2200; rem 3; reset 500
    "1750,RULE,a,3", // new 2500+1500=4000, 4000-1750 = 2250 > 2000 deny; retry 4000-2000-1750 = 250;
    //                  rem floor((2000-750)/500) = 2 (2 left, 3 asked); reset 750
    "2000,RULE,a,3", // new 4000, 4000-2000 = 2000 admit; rem 0; reset 2000
    "5000,RULE,a,1", // tat 4000 < t: from t; new 5500; rem 3; reset 500
];
const GCRA_OUT: &[&str] = &[
    "0,RULE,a,1,true,3,,500",
    "0,RULE,a,3,true,0,,2000",
    "0,RULE,a,1,false,0,500,2000",
    "0,RULE,a,5,false,0,,2000",
    "499,RULE,a,1,false,0,1,1501",
    "500,RULE,a,1,true,0,,2000",
    "1700,RULE,a,0,true,2,,800",
    "1700,RULE,b,1,true,3,,500",
    "1750,RULE,a,3,false,2,250,750",
    "2000,RULE,a,3,true,0,,2000",
    "5000,RULE,a,1,true,3,,500",
];

// Rule g_fine: limit 400 per 1s, burst 1: T = 2500 µs, burst * T = 2500 µs.
// Durations that are not whole ms must be rounded UP.
const GCRA_FINE_IN: &[&str] = &[
    "0,RULE,k,1", // new 2500µs <= 2500µs admit; rem 0; reset 2500µs -> 3 ms
    "1,RULE,k,1", // t 1000µs: new 5000µs, 4000 > 2500 deny; retry 5000-2500-1000 = 1500µs -> 2 ms;
    //               reset 2500-1000 = 1500µs -> 2 ms; rem floor((2500-1500)/2500) = 0
    "3,RULE,k,1", // t 3000µs: tat 2500 < t; new 5500µs, 2500 admit; rem 0; reset 2500µs -> 3 ms
];
const GCRA_FINE_OUT: &[&str] = &[
    "0,RULE,k,1,true,0,,3",
    "1,RULE,k,1,false,0,2,2",
    "3,RULE,k,1,true,0,,3",
];

fn with_rule(rows: &[&str], rule: &str) -> Vec<String> {
    rows.iter().map(|r| r.replace("RULE", rule)).collect()
}

fn assert_replay_rule(input: &[&str], expected: &[&str], rule: &str) {
    let input = with_rule(input, rule);
    let expected = with_rule(expected, rule);
    let input: Vec<&str> = input.iter().map(String::as_str).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_replay(&input, &expected);
}

#[test]
fn gcra_by_hand() {
    assert_replay_rule(GCRA_IN, GCRA_OUT, "g");
    assert_replay_rule(GCRA_FINE_IN, GCRA_FINE_OUT, "g_fine");
}

// Token bucket is the same policy as GCRA (docs/semantics.md, "Token
// bucket"), so the hand-worked GCRA rows hold for it too: capacity 4
// tokens, refill 2 per second.
#[test]
fn token_bucket_by_hand() {
    assert_replay_rule(GCRA_IN, GCRA_OUT, "tb");
    assert_replay_rule(GCRA_FINE_IN, GCRA_FINE_OUT, "tb_fine");
}

/// A deterministic pseudo-random trace over a few keys, costs 0..=5.
fn mixed_trace(rule: &str) -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut t = 0;
    let mut s = String::from("t_ms,rule,key,cost\n");
    for _ in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += x % 400;
        let key = ["a", "b", "c"][usize::try_from(x % 3).expect("small")];
        let cost = (x >> 8) % 6;
        s.push_str(&format!("{t},{rule},{key},{cost}\n"));
    }
    s
}

/// The output columns other than `rule`.
fn columns_without_rule(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        .map(|line| {
            let mut f: Vec<&str> = line.split(',').collect();
            f.remove(1);
            f.join(",")
        })
        .collect()
}

#[test]
fn token_bucket_and_gcra_decide_identically() {
    let run = Run::new();
    let gcra = run.replay(&mixed_trace("g"), &[]);
    let tb = run.replay(&mixed_trace("tb"), &[]);
    assert!(gcra.status.success() && tb.status.success());
    let (gcra, tb) = (
        columns_without_rule(&stdout(&gcra)),
        columns_without_rule(&stdout(&tb)),
    );
    assert_eq!(gcra.len(), 400);
    assert_eq!(gcra, tb);
    // the trace is not trivially all-admitted or all-denied
    let denied = gcra.iter().filter(|r| r.contains(",false,")).count();
    assert!(denied > 20 && denied < 380, "denied {denied} of 400");
}

// Fixed window, rule fw: limit 3 per 1s; w = floor(t / 1000).
//   allowed = count + cost <= 3; remaining = 3 - count; reset = retry = (w+1)*1000 - t
#[test]
fn fixed_window_by_hand() {
    assert_replay(
        &[
            "100,fw,k,1",      // w0 count 1; rem 2; reset 900
            "200,fw,k,2",      // count 3; rem 0; reset 800
            "999,fw,k,1",      // 4 > 3 deny; retry = reset = 1000-999 = 1
            "999,fw,k,4",      // cost 4 > limit: never, retry empty
            "999,fw,k,0",      // peek: 3+0 <= 3 admitted, consumes nothing
            "1000,fw,k,1",     // boundary: w1 count 1; rem 2; reset 1000
            "1000,fw,other,3", // another key, w1 count 3; rem 0
            "1500,fw,k,3",     // 1+3 > 3 deny; retry 2000-1500 = 500; rem 2
            "1500,fw,k,2",     // 1+2 = 3 admit; rem 0; reset 500
            "2500,fw,fresh,0", // peek of an unused key: w2, rem 3; reset 3000-2500 = 500
        ],
        &[
            "100,fw,k,1,true,2,,900",
            "200,fw,k,2,true,0,,800",
            "999,fw,k,1,false,0,1,1",
            "999,fw,k,4,false,0,,1",
            "999,fw,k,0,true,0,,1",
            "1000,fw,k,1,true,2,,1000",
            "1000,fw,other,3,true,0,,1000",
            "1500,fw,k,3,false,2,500,500",
            "1500,fw,k,2,true,0,,500",
            "2500,fw,fresh,0,true,3,,500",
        ],
    );
}

// Sliding window counter, rule sw: limit 4 per 1s (P = 1000 ms).
//   w = floor(t/P); e = t - w*P; prev = count[w-1]; curr = count[w]
//   allowed = prev*(P-e) + (curr+cost)*P <= 4P
//   remaining = max(0, floor((4P - prev*(P-e) - curr*P) / P))
//   reset = (w+2)P - t if curr > 0; (w+1)P - t if curr == 0 < prev; else 0
//   retry = smallest whole µs d such that the same check at t+d is admitted
#[test]
fn sliding_window_by_hand() {
    // Two keys, merged in time order: k (whole-ms boundaries) and k3, whose
    // previous window weighs 3 and so puts a boundary at P/3, not a whole ms.
    assert_replay(
        &[
            "0,sw,k,3",   // k w0: 3P <= 4P admit; curr 3; rem 1; reset 2P-0 = 2000
            "0,sw,k3,3",  // k3: the same
            "500,sw,k,1", // k curr 4; rem 0; reset 2000-500 = 1500
            "600,sw,k,1", // k 5P > 4P deny; rem 0; reset 1400. In w0 curr stays 4 -> no;
            //                 in w1 prev=4: 4(P-e) + P <= 4P <=> e >= P/4 = 250 -> t' 1250, retry 650
            "1000,sw,k3,4", // k3 w1 e=0, prev 3: 3000 + 4000 > 4000 deny; rem floor((4000-3000)/1000) = 1;
            //                 reset 2000-1000 = 1000; in w1 3(P-e) <= 0 needs e = P, so first at
            //                 w2 (prev 0): t' 2000, retry 1000
            "1000,sw,k3,2", // k3 3000 + 2000 > 4000 deny; 3(P-e) + 2P <= 4P <=> e >= P/3 = 333333.3µs:
            //                 e = 333334µs (3*666666 + 2e6 = 3999998 <= 4e6; one µs less gives
            //                 4000001) -> retry 333334µs = 334 ms rounded up; rem 1; reset 1000
            "1100,sw,k,1", // k w1 e=100, prev 4: 4*900 + 1000 = 4600 > 4000 deny; retry 1250-1100 = 150;
            //                 rem floor((4000-3600)/1000) = 0; curr 0 < prev: reset 2000-1100 = 900
            "1250,sw,k,1", // k e=250: 4*750 + 1000 = 4000 admit; curr 1;
            //                 rem floor((4000-3000-1000)/1000) = 0; reset 3000-1250 = 1750
            "1334,sw,k3,2", // k3 e=334000µs: 3*666000 + 2e6 = 3998000 <= 4e6 admit; curr 2;
            //                 rem floor((4e6-1998000-2e6)/1e6) = 0; reset 3000-1334 = 1666
            "1600,sw,k,2", // k e=600: 4*400 + 3*1000 = 4600 deny; rem floor((4000-1600-1000)/1000) = 1;
            //                 retry: 4(P-e) + 3P <= 4P <=> e >= 750 -> t' 1750, retry 150; reset 1400
            "2500,sw,k3,0", // k3 peek, w2 e=500: prev = count[1] = 2, curr 0:
            //                 rem floor((4000-2*500)/1000) = 3; curr 0 < prev: reset 3000-2500 = 500
            "3500,sw,k3,0", // k3 w3: prev = count[2] = 0, curr 0: rem 4; reset 0
            "3500,sw,k3,5", // k3 cost 5 > limit 4: never; rem 4; reset 0
        ],
        &[
            "0,sw,k,3,true,1,,2000",
            "0,sw,k3,3,true,1,,2000",
            "500,sw,k,1,true,0,,1500",
            "600,sw,k,1,false,0,650,1400",
            "1000,sw,k3,4,false,1,1000,1000",
            "1000,sw,k3,2,false,1,334,1000",
            "1100,sw,k,1,false,0,150,900",
            "1250,sw,k,1,true,0,,1750",
            "1334,sw,k3,2,true,0,,1666",
            "1600,sw,k,2,false,1,150,1400",
            "2500,sw,k3,0,true,3,,500",
            "3500,sw,k3,0,true,4,,0",
            "3500,sw,k3,5,false,4,,0",
        ],
    );
}

// Sliding log, rule sl: limit 4 per 1s. An entry made at s counts while
// t < s + 1000. remaining = 4 - used; reset = newest + 1000 - t (0 if empty);
// retry = s_k + 1000 - t for the smallest k with used - (costs 1..k) + cost <= 4.
#[test]
fn sliding_log_by_hand() {
    assert_replay(
        &[
            "0,sl,k,1",   // log (0,1); used 1; rem 3; reset 1000
            "100,sl,k,2", // log (0,1)(100,2); used 3; rem 1; reset 100+1000-100 = 1000
            "300,sl,k,1", // log (0,1)(100,2)(300,1); used 4; rem 0; reset 1000
            "400,sl,k,3", // 4+3 > 4 deny; k=1: 4-1+3 = 6 > 4; k=2: 4-3+3 = 4 -> s_2 = 100:
            //                    retry 100+1000-400 = 700; rem 0; reset 300+1000-400 = 900
            "400,sl,k,1",  // k=1: 4-1+1 = 4 -> s_1 = 0: retry 600
            "400,sl,k,5",  // cost 5 > 4: never
            "999,sl,k,1",  // entry 0 counts until 1000: deny, retry 1; reset 1300-999 = 301
            "1000,sl,k,1", // entry 0 expired: used 3 + 1 = 4 admit; log (100,2)(300,1)(1000,1);
            //                    rem 0; reset 1000+1000-1000 = 1000
            "1100,sl,k,0", // peek: entry 100 expired; used 2; rem 2; reset 2000-1100 = 900
            "1100,sl,k,3", // 2+3 > 4 deny; k=1: 2-1+3 = 4 -> s_1 = 300: retry 300+1000-1100 = 200
            "5000,sl,fresh,0", // empty log: rem 4; reset 0
        ],
        &[
            "0,sl,k,1,true,3,,1000",
            "100,sl,k,2,true,1,,1000",
            "300,sl,k,1,true,0,,1000",
            "400,sl,k,3,false,0,700,900",
            "400,sl,k,1,false,0,600,900",
            "400,sl,k,5,false,0,,900",
            "999,sl,k,1,false,0,1,301",
            "1000,sl,k,1,true,0,,1000",
            "1100,sl,k,0,true,2,,900",
            "1100,sl,k,3,false,2,200,900",
            "5000,sl,fresh,0,true,4,,0",
        ],
    );
}

#[test]
fn cost_column_optional_and_empty_cost_is_one() {
    let run = Run::new();
    // fixed window limit 3: three cost-1 checks admitted, the fourth denied
    let out = run.replay("t_ms,rule,key\n0,fw,k\n1,fw,k\n2,fw,k\n3,fw,k\n", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{HEADER}\n0,fw,k,1,true,2,,1000\n1,fw,k,1,true,1,,999\n\
             2,fw,k,1,true,0,,998\n3,fw,k,1,false,0,997,997\n"
        )
    );
    let out = run.replay("t_ms,rule,key,cost\n0,fw,k,\n0,fw,k,2\n", &[]);
    assert_eq!(
        stdout(&out),
        format!("{HEADER}\n0,fw,k,1,true,2,,1000\n0,fw,k,2,true,0,,1000\n")
    );
}

#[test]
fn keys_are_arbitrary_strings() {
    let run = Run::new();
    // a comma, a quote and a newline inside keys; they are distinct keys
    let out = run.replay(
        "t_ms,rule,key,cost\n0,fw,\"a,b\",3\n0,fw,\"say \"\"hi\"\"\",3\n0,fw,\"x\ny\",3\n0,fw,\"a,b\",1\n",
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{HEADER}\n0,fw,\"a,b\",3,true,0,,1000\n0,fw,\"say \"\"hi\"\"\",3,true,0,,1000\n\
             0,fw,\"x\ny\",3,true,0,,1000\n0,fw,\"a,b\",1,false,0,1000,1000\n"
        )
    );
}

#[test]
fn summary_per_rule_on_stderr() {
    let run = Run::new();
    let out = run.replay(
        "t_ms,rule,key,cost\n0,sl,k,4\n0,fw,k,3\n0,sl,k,1\n0,fw,k,1\n0,fw,k,0\n",
        &[],
    );
    assert!(out.status.success());
    // rules in config order (fw before sl), only those the trace used
    assert_eq!(
        stderr(&out),
        "rule     checks  admitted    denied\n\
         fw            3         2         1\n\
         sl            2         1         1\n\
         total         5         3         2\n"
    );
}

#[test]
fn out_writes_the_file() {
    let run = Run::new();
    let out_path = run.path("decisions.csv");
    let out = run.replay(
        "t_ms,rule,key,cost\n0,fw,k,3\n10,fw,k,1\n",
        &["--out", out_path.to_str().expect("utf-8 path")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        std::fs::read_to_string(&out_path).expect("output written"),
        format!("{HEADER}\n0,fw,k,3,true,0,,1000\n10,fw,k,1,false,0,990,990\n")
    );
}

#[test]
fn header_only_trace_gives_header_only_output() {
    let run = Run::new();
    let out = run.replay("t_ms,rule,key,cost\n", &[]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), format!("{HEADER}\n"));
}

/// Replays `trace`, expects failure, returns stderr.
fn failing(trace: &str) -> String {
    let run = Run::new();
    let out = run.replay(trace, &[]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    stderr(&out)
}

#[test]
fn bad_rows_name_the_line() {
    let cases: &[(&str, &str)] = &[
        (
            "t_ms,rule,key,cost\n0,fw,k,1\n200,fw,k,1\n100,fw,k,1\n",
            "trace.csv:4: t_ms 100 is earlier than 200 on the row before",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,1\n0,nope,k,1\n",
            "trace.csv:3: unknown rule \"nope\"",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,-1\n",
            "trace.csv:2: cost \"-1\" is not a whole number >= 0",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,1\n0,fw,k,1.5\n",
            "trace.csv:3: cost \"1.5\" is not a whole number >= 0",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,x\n",
            "trace.csv:2: cost \"x\" is not a whole number >= 0",
        ),
        (
            "t_ms,rule,key,cost\n1.5,fw,k,1\n",
            "trace.csv:2: t_ms \"1.5\" is not a whole number of milliseconds",
        ),
        (
            "t_ms,rule,key,cost\n-1,fw,k,1\n",
            "trace.csv:2: t_ms \"-1\" is not a whole number of milliseconds",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,1\n0,fw,k\n",
            "trace.csv:3: expected 4 fields like the header, found 3",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,1,extra\n",
            "trace.csv:2: expected 4 fields like the header, found 5",
        ),
        (
            "time,rule,key,cost\n0,fw,k,1\n",
            "trace.csv:1: the header must be t_ms,rule,key,cost (cost optional), then op and ttl_ms if wanted, found \"time,rule,key,cost\"",
        ),
        (
            "t_ms,rule,key,cost\n99999999999999999999,fw,k,1\n",
            "trace.csv:2: t_ms 99999999999999999999 is too large; the most is 8374751254740",
        ),
        (
            "t_ms,rule,key,cost\n0,fw,k,99999999999999999999\n",
            "trace.csv:2: cost 99999999999999999999 is too large; the most is 18446744073709551615",
        ),
        (
            // t_ms * 1000 fits a u64, but the algorithms' t + period would not
            "t_ms,rule,key,cost\n18446744073709551,fw,k,1\n",
            "trace.csv:2: t_ms 18446744073709551 is too large; the most is 8374751254740",
        ),
        (
            // tollgate::time::MAX_TIME / 1000 is the last one accepted
            "t_ms,rule,key,cost\n8374751254740,fw,k,1\n8374751254741,fw,k,1\n",
            "trace.csv:3: t_ms 8374751254741 is too large; the most is 8374751254740",
        ),
    ];
    for (trace, want) in cases {
        let err = failing(trace);
        assert!(
            err.contains(want),
            "trace {trace:?}\nwant {want:?}\ngot {err:?}"
        );
    }
}

#[test]
fn key_over_the_size_limit_is_an_error() {
    let long = "k".repeat(tollgate::limits::MAX_KEY_LEN + 1);
    let err = failing(&format!("t_ms,rule,key,cost\n0,fw,ok,1\n0,fw,{long},1\n"));
    assert!(
        err.contains(&format!(
            "trace.csv:3: key is {} bytes, longer than the limit of {} bytes",
            tollgate::limits::MAX_KEY_LEN + 1,
            tollgate::limits::MAX_KEY_LEN
        )),
        "{err}"
    );
    // exactly at the limit is fine
    let run = Run::new();
    let at_limit = "k".repeat(tollgate::limits::MAX_KEY_LEN);
    let out = run.replay(&format!("t_ms,rule,key,cost\n0,fw,{at_limit},1\n"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn rows_before_a_bad_row_are_written() {
    let run = Run::new();
    let out_path = run.path("decisions.csv");
    let out = run.replay(
        "t_ms,rule,key,cost\n0,fw,k,1\n0,nope,k,1\n",
        &["--out", out_path.to_str().expect("utf-8 path")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&out_path).expect("output written"),
        format!("{HEADER}\n0,fw,k,1,true,2,,1000\n")
    );
}

#[test]
fn an_unreachable_redis_fails_clearly() {
    let run = Run::new();
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let out = run.replay("t_ms,rule,key,cost\n0,fw,k,1\n", &["--store", &url]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "tollgate replay: store {url}/0: store unavailable"
        )),
        "{err}"
    );
    assert_eq!(stdout(&out), "");

    // the config's store URL is the default for --store
    let config = CONFIG.replace(
        "[[rules]]\nname = \"g\"",
        &format!("[store]\nurl = \"redis://127.0.0.1:{port}\"\n\n[[rules]]\nname = \"g\""),
    );
    run.write("tollgate.toml", &config);
    let out = run.replay("t_ms,rule,key,cost\n0,fw,k,1\n", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("store unavailable"),
        "{}",
        stderr(&out)
    );
    // and --store memory overrides it
    let out = run.replay("t_ms,rule,key,cost\n0,fw,k,1\n", &["--store", "memory"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn bad_store_url_and_bad_config_fail_clearly() {
    let run = Run::new();
    let out = run.replay("t_ms,rule,key,cost\n", &["--store", "redis://h:0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "tollgate replay: --store: store URL \"redis://h:0\": port \"0\" must be a number from 1 to 65535\n"
    );

    run.write(
        "tollgate.toml",
        "[[rules]]\nname = \"x\"\nalgorithm = \"gcra\"\nlimit = 0\nperiod = \"1s\"\n",
    );
    let out = run.replay("t_ms,rule,key,cost\n", &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("tollgate.toml:4: rules[0].limit: limit must be at least 1"),
        "{err}"
    );
}

#[test]
fn missing_trace_file_fails_clearly() {
    let run = Run::new();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config"])
        .arg(run.path("tollgate.toml"))
        .arg("--trace")
        .arg(run.path("missing.csv"))
        .output()
        .expect("run tollgate");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot open trace"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_example_replays_with_denials_in_every_algorithm() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(root.join("examples/tollgate.toml"))
        .arg("--trace")
        .arg(root.join("examples/trace.csv"))
        .output()
        .expect("run tollgate");
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stderr(&out);
    for rule in [
        "api_per_key",
        "upload_mib_per_tenant",
        "login_per_ip",
        "search_per_user",
        "password_reset_per_account",
    ] {
        let line = summary
            .lines()
            .find(|l| l.starts_with(&format!("{rule} ")))
            .unwrap_or_else(|| panic!("no summary line for {rule}: {summary}"));
        let nums: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().expect("number"))
            .collect();
        assert!(
            nums[1] > 0 && nums[2] > 0,
            "{rule} needs admits and denials: {line}"
        );
    }
    let rows = stdout(&out);
    assert_eq!(rows.lines().next(), Some(HEADER));
}

/// Runs `tollgate replay` with `trace` as the `--trace` argument and `input`
/// on its stdin, failing the test if it has not ended within 30 s (the bug
/// it guards: a trace without line ends read until memory ran out).
fn replay_bounded(run: &Run, trace: &str, input: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.arg("replay")
        .arg("--config")
        .arg(run.path("tollgate.toml"))
        .arg("--trace")
        .arg(trace);
    support::output_within(cmd, input, std::time::Duration::from_secs(30))
}

#[test]
fn a_trace_without_line_ends_is_an_error_not_unbounded_memory() {
    let run = Run::new();
    let out = replay_bounded(&run, "/dev/zero", b"");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/dev/zero:1: the row is longer than 16384 bytes"),
        "{}",
        stderr(&out)
    );
    // The same from a pipe, after good rows.
    let mut input = b"t_ms,rule,key,cost\n0,fw,k,1\n".to_vec();
    input.resize(input.len() + 1_000_000, b'x');
    let out = replay_bounded(&run, "-", &input);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("-:3: the row is longer than 16384 bytes"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("0,fw,k,1,true,2,"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_trace_far_longer_than_one_row_streams_through_a_pipe() {
    let run = Run::new();
    // 20,000 rows, about 400 KB: many times the bound on one row, which
    // therefore applies to each row, not to the trace.
    let mut input = String::from("t_ms,rule,key,cost\n");
    for i in 0..20_000 {
        input.push_str(&format!("{},fw,key-{i},1\n", i / 10));
    }
    let out = replay_bounded(&run, "-", input.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 20_001);
    assert!(stderr(&out).contains("fw"), "{}", stderr(&out));
}
