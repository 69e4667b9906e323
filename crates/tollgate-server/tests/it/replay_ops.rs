//! `tollgate replay` with an `op` column: charges, reservations settled or
//! cancelled, leases released or renewed, run by the real binary on traces
//! whose decisions were worked out by hand from docs/semantics.md (the
//! arithmetic is in the comments; times are ms).

use std::process::{Command, Output};

use crate::support::{stderr, stdout};
use tempfile::TempDir;

const HEADER: &str = "t_ms,rule,key,cost,allowed,remaining,retry_after_ms,reset_after_ms,op,debt";

const CONFIG: &str = r#"
[[rules]]
name = "fw"
algorithm = "fixed_window"
limit = 100
period = "1m"

[[rules]]
name = "g"
algorithm = "gcra"
limit = 10
period = "1s"

[[rules]]
name = "inflight"
algorithm = "concurrency"
limit = 2
lease = "1s"
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

    fn replay(&self, trace: &str) -> Output {
        let path = self.dir.path().join("trace.csv");
        std::fs::write(&path, trace).expect("write trace");
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("replay")
            .arg("--config")
            .arg(self.dir.path().join("tollgate.toml"))
            .arg("--trace")
            .arg(&path)
            .output()
            .expect("run tollgate")
    }
}

/// Replays rows under the header `t_ms,rule,key,cost,op,ttl_ms` and
/// asserts the output rows exactly.
fn assert_ops(input: &[&str], expected: &[&str]) {
    let out = Run::new().replay(&format!(
        "t_ms,rule,key,cost,op,ttl_ms\n{}\n",
        input.join("\n")
    ));
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), format!("{HEADER}\n{}\n", expected.join("\n")));
}

/// The replay of `input` fails; its message.
fn failing(trace: &str) -> String {
    let out = Run::new().replay(trace);
    assert!(
        !out.status.success(),
        "expected a failure, got {}",
        stdout(&out)
    );
    stderr(&out)
}

// Every op once or more.
// fw: fixed window, 100 per 1 min: window [0, 60000).
// g: GCRA 10 per 1 s, burst 10: T = 100, burst*T = 1000.
// inflight: concurrency, 2 slots, lease 1000.
#[test]
fn every_op_by_hand() {
    assert_ops(
        &[
            "0,fw,a,30,reserve,",     // count 30; rem 70; reset 60000
            "0,fw,a,30,reserve,1000", // count 60; rem 40 (ttl 1000)
            "10,fw,a,50,settle,",     // oldest (est 30) at 50: +20 -> 80; rem 20; debt 0
            "20,fw,a,,cancel,",       // the other (est 30, in its ttl): -30 -> 50; rem 50
            "30,fw,a,80,charge,",     // 130: debt 30; rem 0
            "40,fw,a,1,,",            // empty op = check: 131 > 100 deny; retry 59960
            "40,fw,a,0,check,",       // peek: 130 + 0 > 100 denied too; nothing consumed
            "50,g,u,15,charge,",      // tat 50 + 1500 = 1550; debt ceil((1550-50-1000)/100) = 5
            "150,g,u,1,check,",       // new 1650, 1650-150 > 1000 deny; retry 1650-1000-150 = 500;
            //                            reset 1550-150 = 1400
            "650,g,u,1,reserve,", // new 1650, 1650-650 = 1000 admit; rem 0; reset 1000
            "650,g,u,3,settle,",  // 3 > est 1: charge 2: tat 1850; debt ceil(200/100 - 1) ...
            //                            = ceil((1850-650-1000)/100) = 2; reset 1200
            "700,inflight,k,,acquire,", // 1 held; rem 1; reset 1000 (expires 1700)
            "710,inflight,k,,acquire,", // 2 held; rem 0; expires 1710
            "720,inflight,k,,acquire,", // deny; retry: first expiry 1700 - 720 = 980; reset 1710-720
            "730,inflight,k,,renew,",   // the oldest (700) to 1730; reset 1000
            "1720,inflight,k,,release,", // the 710 lease ran out at 1710; the oldest live is
            //                              the renewed one: released; nothing held
            "1720,inflight,k,0,check,", // peek: rem 2; reset 0
        ],
        &[
            "0,fw,a,30,true,70,,60000,reserve,",
            "0,fw,a,30,true,40,,60000,reserve,",
            "10,fw,a,50,true,20,,59990,settle,0",
            "20,fw,a,0,true,50,,59980,cancel,0",
            "30,fw,a,80,true,0,,59970,charge,30",
            "40,fw,a,1,false,0,59960,59960,check,",
            "40,fw,a,0,false,0,59960,59960,check,",
            "50,g,u,15,true,0,,1500,charge,5",
            "150,g,u,1,false,0,500,1400,check,",
            "650,g,u,1,true,0,,1000,reserve,",
            "650,g,u,3,true,0,,1200,settle,2",
            "700,inflight,k,1,true,1,,1000,acquire,",
            "710,inflight,k,1,true,0,,1000,acquire,",
            "720,inflight,k,1,false,0,980,990,acquire,",
            "730,inflight,k,0,true,0,,1000,renew,",
            "1720,inflight,k,0,true,2,,0,release,",
            "1720,inflight,k,0,true,2,,0,check,",
        ],
    );
}

// The oldest open reservation is the one acted on, per (rule, key): the
// estimates differ, so what a cancel gives back shows which it was.
#[test]
fn settle_and_cancel_take_the_oldest_open_reservation_of_their_key() {
    assert_ops(
        &[
            "0,fw,a,10,reserve,",   // a: 10; rem 90
            "0,fw,b,5,reserve,",    // b: 5 (another key: its own queue)
            "0,fw,a,40,reserve,",   // a: 50; rem 50
            "10,fw,a,,cancel,",     // a's oldest (10) back: 40; rem 60
            "20,fw,b,,cancel,",     // b's own (5) back: rem 100; reset (w+1)*P - t, count or not
            "30,fw,a,40,settle,",   // a's next (40) at 40: nothing changes; rem 60
            "40,fw,a,20,reserve,2", // a: 60; ttl 2 ms
            "40,fw,a,30,reserve,",  // a: 90
            "50,fw,a,,cancel,",     // the 20 one is past its ttl (42) but remembered: the oldest
            //                         open; late, so nothing given back: rem 10
            "60,fw,a,,cancel,", // then the 30 one: 60; rem 40
        ],
        &[
            "0,fw,a,10,true,90,,60000,reserve,",
            "0,fw,b,5,true,95,,60000,reserve,",
            "0,fw,a,40,true,50,,60000,reserve,",
            "10,fw,a,0,true,60,,59990,cancel,0",
            "20,fw,b,0,true,100,,59980,cancel,0",
            "30,fw,a,40,true,60,,59970,settle,0",
            "40,fw,a,20,true,40,,59960,reserve,",
            "40,fw,a,30,true,10,,59960,reserve,",
            "50,fw,a,0,true,10,,59950,cancel,0",
            "60,fw,a,0,true,40,,59940,cancel,0",
        ],
    );
}

// A late settle charges what exceeds the estimate and gives nothing back.
#[test]
fn a_late_settle_keeps_the_estimate_and_charges_the_excess() {
    assert_ops(
        &[
            "0,fw,a,30,reserve,100", // rem 70, due at 100
            "0,fw,a,30,reserve,100", // rem 40
            "200,fw,a,10,settle,",   // late: 10 < 30 but nothing back; rem 40
            "300,fw,a,50,settle,",   // late: 50 - 30 = 20 charged: rem 20
        ],
        &[
            "0,fw,a,30,true,70,,60000,reserve,",
            "0,fw,a,30,true,40,,60000,reserve,",
            "200,fw,a,10,true,40,,59800,settle,0",
            "300,fw,a,50,true,20,,59700,settle,0",
        ],
    );
}

// A denied reservation or acquire opens nothing: a settle or release after
// it finds nothing open.
#[test]
fn denied_reservations_and_acquires_open_nothing() {
    let m = failing("t_ms,rule,key,cost,op\n0,fw,a,101,reserve\n1,fw,a,1,settle\n");
    assert!(
        m.contains("trace.csv:3: op settle: rule \"fw\" key \"a\" has no open reservation"),
        "{m}"
    );
    let m = failing(
        "t_ms,rule,key,cost,op\n0,inflight,k,2,acquire\n0,inflight,k,1,acquire\n\
         0,inflight,k,,release\n0,inflight,k,,release\n",
    );
    assert!(
        m.contains("trace.csv:5: op release: rule \"inflight\" key \"k\" has no live lease"),
        "{m}"
    );
}

#[test]
fn nothing_open_is_an_error_naming_the_line() {
    let cases = [
        (
            "0,fw,a,1,settle,",
            "trace.csv:2: op settle: rule \"fw\" key \"a\" has no open reservation to settle",
        ),
        (
            "0,fw,a,,cancel,",
            "trace.csv:2: op cancel: rule \"fw\" key \"a\" has no open reservation to cancel",
        ),
        (
            "0,inflight,k,,release,",
            "trace.csv:2: op release: rule \"inflight\" key \"k\" has no live lease to release",
        ),
        (
            "0,inflight,k,,renew,",
            "trace.csv:2: op renew: rule \"inflight\" key \"k\" has no live lease to renew",
        ),
    ];
    for (row, want) in cases {
        let m = failing(&format!("t_ms,rule,key,cost,op,ttl_ms\n{row}\n"));
        assert!(m.contains(want), "{row}: {m}");
    }
    // Settled once, then again: the second finds nothing.
    let m = failing("t_ms,rule,key,cost,op\n0,fw,a,5,reserve\n1,fw,a,5,settle\n2,fw,a,5,settle\n");
    assert!(m.contains("trace.csv:4: op settle"), "{m}");
    // Another key's reservation is not this key's.
    let m = failing("t_ms,rule,key,cost,op\n0,fw,a,5,reserve\n1,fw,b,5,settle\n");
    assert!(
        m.contains("trace.csv:3: op settle: rule \"fw\" key \"b\""),
        "{m}"
    );
    // A reservation is forgotten ttl + 1 h after it was made: 60 s + 3600 s.
    let forgotten = 60_000 + 3_600_000;
    let trace = format!(
        "t_ms,rule,key,cost,op\n0,fw,a,5,reserve\n{},fw,a,5,settle\n",
        forgotten
    );
    assert!(failing(&trace).contains("trace.csv:3: op settle"));
    let trace = format!(
        "t_ms,rule,key,cost,op\n0,fw,a,5,reserve\n{},fw,a,5,settle\n",
        forgotten - 1
    );
    let out = Run::new().replay(&trace);
    assert!(
        out.status.success(),
        "1 ms earlier it is still remembered: {}",
        stderr(&out)
    );
    // A lease past its lease (1 s) is gone; renewed, it lives on.
    let m = failing("t_ms,rule,key,cost,op\n0,inflight,k,,acquire\n1000,inflight,k,,release\n");
    assert!(m.contains("trace.csv:3: op release"), "{m}");
    let out = Run::new().replay(
        "t_ms,rule,key,cost,op\n0,inflight,k,,acquire\n900,inflight,k,,renew\n\
         1899,inflight,k,,release\n",
    );
    assert!(
        out.status.success(),
        "renewed at 900, live until 1900: {}",
        stderr(&out)
    );
}

#[test]
fn bad_op_ttl_and_cost_values_name_line_and_column() {
    let h = "t_ms,rule,key,cost,op,ttl_ms\n";
    let cases = [
        (
            "0,fw,a,1,bogus,",
            "trace.csv:2: op \"bogus\" is not one of check, charge",
        ),
        ("0,fw,a,1,Check,", "trace.csv:2: op \"Check\" is not one of"),
        (
            "0,fw,a,1,reserve,abc",
            "trace.csv:2: ttl_ms \"abc\" is not a whole number of milliseconds in 1 ..= 86400000",
        ),
        (
            "0,fw,a,1,reserve,0",
            "trace.csv:2: ttl_ms \"0\" is not a whole number",
        ),
        (
            "0,fw,a,1,reserve,86400001",
            "trace.csv:2: ttl_ms \"86400001\" is not",
        ),
        ("0,fw,a,1,reserve,-5", "trace.csv:2: ttl_ms \"-5\" is not"),
        (
            "0,fw,a,1,check,100",
            "trace.csv:2: ttl_ms \"100\" on a check row: ttl_ms is for reserve rows only",
        ),
        ("0,fw,a,5,cancel,", "trace.csv:2: cost 5 on a cancel row"),
        (
            "0,inflight,k,1,release,",
            "trace.csv:2: cost 1 on a release row",
        ),
        (
            "0,fw,a,x,charge,",
            "trace.csv:2: cost \"x\" is not a whole number >= 0",
        ),
        // Ops on rules they do not apply to.
        (
            "0,inflight,k,5,charge,",
            "trace.csv:2: rule \"inflight\" (concurrency) is a concurrency rule: its slots are acquired, not charged",
        ),
        (
            "0,inflight,k,5,reserve,",
            "trace.csv:2: rule \"inflight\" (concurrency) is a concurrency rule",
        ),
        (
            "0,inflight,k,1,check,",
            "trace.csv:2: rule \"inflight\" (concurrency) is a concurrency rule: acquire and release",
        ),
        (
            "0,fw,a,1,acquire,",
            "trace.csv:2: rule \"fw\" (fixed_window) is not a concurrency rule",
        ),
        (
            "0,inflight,k,1,settle,",
            "trace.csv:2: op settle: rule \"inflight\" is a concurrency rule",
        ),
        (
            "0,fw,a,,renew,",
            "trace.csv:2: op renew: rule \"fw\" is not a concurrency rule",
        ),
    ];
    for (row, want) in cases {
        let m = failing(&format!("{h}{row}\n"));
        assert!(m.contains(want), "{row}: {m}");
    }
}

#[test]
fn bad_headers_name_the_column() {
    let cases = [
        (
            "t_ms,rule,key,cost,ttl_ms\n",
            "trace.csv:1: the header has ttl_ms but no op column",
        ),
        (
            "t_ms,rule,key,op,op\n",
            "trace.csv:1: column \"op\" is named twice",
        ),
        (
            "t_ms,rule,key,cost,operation\n",
            "trace.csv:1: column 5 of the header is \"operation\"",
        ),
        (
            "t_ms,key,rule,op\n",
            "trace.csv:1: the header must be t_ms,rule,key,cost",
        ),
    ];
    for (header, want) in cases {
        let m = failing(&format!("{header}0,fw,a,1\n"));
        assert!(m.contains(want), "{header}: {m}");
    }
}

#[test]
fn output_columns_with_and_without_op() {
    let run = Run::new();
    // Without an op column: the columns of a plain replay, no op or debt.
    let out = run.replay("t_ms,rule,key,cost\n0,fw,a,2\n");
    assert_eq!(
        stdout(&out),
        "t_ms,rule,key,cost,allowed,remaining,retry_after_ms,reset_after_ms\n\
         0,fw,a,2,true,98,,60000\n"
    );
    // The op column in any place after key, the cost column absent (cost 1
    // for check, charge, reserve, acquire; 0 for the others): op and debt at
    // the end, op spelled out.
    let out = run.replay(
        "t_ms,rule,key,op\n0,fw,a,\n0,fw,a,charge\n0,fw,a,reserve\n1,fw,a,settle\n\
         2,inflight,k,acquire\n3,inflight,k,release\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{HEADER}\n0,fw,a,1,true,99,,60000,check,\n0,fw,a,1,true,98,,60000,charge,0\n\
             0,fw,a,1,true,97,,60000,reserve,\n1,fw,a,1,true,97,,59999,settle,0\n\
             2,inflight,k,1,true,1,,1000,acquire,\n3,inflight,k,0,true,2,,0,release,\n"
        )
    );
    let out = run.replay("t_ms,rule,key,op,cost\n0,fw,a,charge,150\n");
    assert_eq!(
        stdout(&out),
        format!("{HEADER}\n0,fw,a,150,true,0,,60000,charge,50\n")
    );
}

// The LLM example (docs/replay.md) replays through, with every op it
// shows: in-flight slots, reservations settled and cancelled, charges
// into debt, and reservations denied while the team is over budget.
#[test]
fn the_llm_example_replays_with_its_ops() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(root.join("examples/llm-tokens.toml"))
        .arg("--trace")
        .arg(root.join("examples/llm-trace.csv"))
        .output()
        .expect("run tollgate");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with(&format!("{HEADER}\n")));
    for op in [
        "acquire", "release", "reserve", "settle", "cancel", "charge",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains(",true,") && l.contains(&format!(",{op},"))),
            "no admitted {op} row"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.contains(",false,") && l.contains(",reserve,"))
    );
    assert!(
        text.lines()
            .any(|l| l.contains(",charge,") && !l.ends_with(",charge,0")),
        "the batch job's charges run into debt"
    );
}
