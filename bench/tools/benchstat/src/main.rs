//! `benchstat`: the statistics of `bench/*.sh`, so that the scripts only
//! start and stop servers and load tools. See `USAGE` (`benchstat --help`)
//! and bench/README.md, "How the scripts measure".

mod parse;
mod procfs;
mod record;
mod report;
mod run;
mod stats;

use std::io::{Read, Write};
use std::process::ExitCode;

use report::{Column, Fmt, Grid, RatioRow};
use stats::{Expr, Goal, Of};

const USAGE: &str = "\
benchstat: the statistics of bench/*.sh (built by them: cargo build --release -p benchstat)

benchstat run --results FILE --id ID --round N [--label TEXT] [--sut 'PID...'] [--aux 'PID...']
              [--parse wrk|oha|grpc-load|kv|redis-benchmark|none] [--count N|FIELD]
              [--out FILE] [--quiet] [--set KEY=VALUE]... -- COMMAND ARGS...
    Runs one load tool (stdout to --out, stderr to --out.err) and appends its record to the
    results: what it parsed (rps, p50/p99/max ms, n requests, bad answers), the CPU seconds
    of the servers under test (--sut, with their descendants: srv_s, srv_sys_s), of what
    they lean on (--aux: aux_s), of the load tool (load_s) and of the machine (busy_s,
    all_s, steal_s), from /proc. --quiet first waits for a quiet machine (as `quiet`).
    Tables derive per request: srv, srv_sys, aux, aux_sys, load (us), non2xx, other,
    steal (%). A run's `best` figure (--set best=-p99) overrides how its best round is picked.
benchstat put FILE ID ROUND KEY=VALUE...
    Adds figures to a run (e.g. calls counted by redis-server afterwards, or its n).
benchstat quiet
    Waits until the cores are under BENCH_QUIET_BUSY % busy (25), BENCH_QUIET_WAIT s at most (60).
benchstat settle --attempt FILE --results FILE --try N [--what TEXT]
    Quiet-machine retry of a set of runs written to FILE: exit 0 when it (or the quietest of
    BENCH_TRIES attempts, 3) was appended to the results, exit 3 to measure the set again
    (one of its runs saw other processes take over BENCH_MAX_OTHER % of the cores, 20).
benchstat table FILE [--of best|best:[-]FIELD|rounds] [--ids 'PATTERN...'] [--label HEADER] [--md]
                (--col HEADER EXPR FMT | --range HEADER FIELD FMT)...
    One row per target (in --ids order, * matches anything): a figure of its best round, or
    the median over its rounds of each column (--of rounds, the default). EXPR: figures of
    the row joined by spaced + and one / or - (`srv + aux`, `calls / n`; ID:FIELD for
    another target's). FMT: decimals, with % appended (`2`, `1%`). --range: least..most.
benchstat ratios FILE [--of best|rounds] [--field FIELD] [--fmt FMT] [--title TEXT] [--md]
                 (--col HEADER SUFFIX)... (--row LABEL EXPR GOAL)...
    One row per expression of targets (`mem.{} / tc.{}`, `proxy{}:p99 - direct{}:p99`,
    ID alone meaning ID:FIELD), {} replaced by each column's suffix; the median of the
    per-round values (--of rounds, the default) or the value on best rounds. GOAL: >=X,
    <=X or -; the worst column is judged: met or MISSED.
benchstat commandstats NAME...    (stdin: redis-cli info commandstats)
    Prints `CALLS USEC` of those commands (fcall evalsha eval...).
benchstat callgrind [--per N] FILE...
    Prints the instructions callgrind counted in the files (summed), or per N operations.
benchstat mem PID
    Prints `VmHWM VmRSS` of the process, in KiB.
benchstat stats    (stdin: one number or duration, e.g. 1.2ms, a line)
    Prints `COUNT MEDIAN MIN MAX` (durations in ms).
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("benchstat: {e}");
            ExitCode::from(2)
        }
    }
}

fn print(text: &str) -> Result<(), String> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| e.to_string())
}

fn stdin() -> Result<String, String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Takes the next `n` values of an option.
fn take<'a>(
    it: &mut std::slice::Iter<'a, String>,
    flag: &str,
    n: usize,
) -> Result<Vec<&'a str>, String> {
    let v: Vec<&str> = it.by_ref().take(n).map(String::as_str).collect();
    if v.len() < n {
        return Err(format!("{flag} needs {n} value(s)"));
    }
    Ok(v)
}

fn one<'a>(it: &mut std::slice::Iter<'a, String>, flag: &str) -> Result<&'a str, String> {
    Ok(take(it, flag, 1)?[0])
}

fn pids(text: &str) -> Result<Vec<u32>, String> {
    text.split([' ', ',', '\n'])
        .filter(|s| !s.is_empty())
        .map(|p| p.parse().map_err(|_| format!("bad pid {p:?}")))
        .collect()
}

fn dispatch(args: &[String]) -> Result<ExitCode, String> {
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return Ok(ExitCode::from(2));
    };
    match cmd.as_str() {
        "-h" | "--help" | "help" => print(USAGE)?,
        "run" => run::run(&run_args(rest)?)?,
        "put" => {
            let [file, id, round, kvs @ ..] = rest else {
                return Err("put FILE ID ROUND KEY=VALUE...".into());
            };
            let mut f = parse::Fields::new();
            f.insert("id".into(), id.clone());
            f.insert("round".into(), round.clone());
            for kv in kvs {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("put: {kv:?} is not KEY=VALUE"))?;
                f.insert(k.into(), v.into());
            }
            record::append(file, &f)?;
        }
        "quiet" => run::quiet(),
        "settle" => return settle(rest),
        "table" => print(&table(rest)?)?,
        "ratios" => print(&ratios(rest)?)?,
        "commandstats" => {
            let (calls, usec) = parse::commandstats(&stdin()?, rest);
            print(&format!("{calls} {usec}\n"))?;
        }
        "callgrind" => print(&format!("{}\n", callgrind(rest)?))?,
        "mem" => {
            let pid = rest.first().ok_or("mem PID")?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map_err(|e| format!("{pid}: {e}"))?;
            let (hwm, rss) = procfs::parse_memory(&status).ok_or("no VmHWM/VmRSS")?;
            print(&format!("{hwm} {rss}\n"))?;
        }
        "stats" => {
            let v: Vec<f64> = stdin()?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| parse::millis(l).ok_or(format!("stats: not a number: {l:?}")))
                .collect::<Result<_, _>>()?;
            let (lo, hi) = (
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            );
            match stats::median(&v) {
                Some(m) => print(&format!("{} {m} {lo} {hi}\n", v.len()))?,
                None => print("0 0 0 0\n")?,
            }
        }
        other => return Err(format!("unknown command {other:?} (benchstat --help)")),
    }
    Ok(ExitCode::SUCCESS)
}

fn run_args(rest: &[String]) -> Result<run::Run, String> {
    let mut r = run::Run {
        parse: "none".into(),
        ..run::Run::default()
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--results" => r.results = one(&mut it, flag)?.into(),
            "--id" => r.id = one(&mut it, flag)?.into(),
            "--round" => r.round = one(&mut it, flag)?.into(),
            "--label" => r.label = one(&mut it, flag)?.into(),
            "--sut" => r.sut.extend(pids(one(&mut it, flag)?)?),
            "--aux" => r.aux.extend(pids(one(&mut it, flag)?)?),
            "--parse" => r.parse = one(&mut it, flag)?.into(),
            "--count" => r.count = Some(one(&mut it, flag)?.into()),
            "--out" => r.out = Some(one(&mut it, flag)?.into()),
            "--quiet" => r.quiet = true,
            "--set" => {
                let kv = one(&mut it, flag)?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("--set {kv:?} is not KEY=VALUE"))?;
                r.set.push((k.into(), v.into()));
            }
            "--" => {
                r.command = it.by_ref().cloned().collect();
            }
            _ => return Err(format!("run: unknown option {flag:?}")),
        }
    }
    if r.results.is_empty() || r.id.is_empty() || r.round.is_empty() {
        return Err("run needs --results, --id and --round".into());
    }
    if r.label.is_empty() {
        r.label.clone_from(&r.id);
    }
    Ok(r)
}

fn settle(rest: &[String]) -> Result<ExitCode, String> {
    let (mut attempt, mut results, mut try_no, mut what) = ("", "", 1, "this set");
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--attempt" => attempt = one(&mut it, flag)?,
            "--results" => results = one(&mut it, flag)?,
            "--try" => try_no = one(&mut it, flag)?.parse().map_err(|_| "--try N")?,
            "--what" => what = one(&mut it, flag)?,
            _ => return Err(format!("settle: unknown option {flag:?}")),
        }
    }
    Ok(match run::settle(attempt, results, try_no, what)? {
        run::Settled::Kept => ExitCode::SUCCESS,
        run::Settled::Again => ExitCode::from(3),
    })
}

/// The results file and the options shared by `table` and `ratios`.
struct Common<'a> {
    file: &'a str,
    of: Of,
    md: bool,
}

fn show(grid: &Grid, md: bool) -> String {
    if md { grid.markdown() } else { grid.text() }
}

fn table(rest: &[String]) -> Result<String, String> {
    let (file, rest) = rest.split_first().ok_or("table FILE ...")?;
    let mut c = Common {
        file,
        of: Of::Rounds,
        md: false,
    };
    let (mut ids, mut label, mut cols) = (Vec::new(), "target".to_owned(), Vec::new());
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--of" => c.of = Of::parse(one(&mut it, flag)?)?,
            "--md" => c.md = true,
            "--ids" => ids.extend(one(&mut it, flag)?.split_whitespace().map(String::from)),
            "--label" => one(&mut it, flag)?.clone_into(&mut label),
            "--col" => {
                let v = take(&mut it, flag, 3)?;
                let expr = Expr::parse(v[1], false)?;
                cols.push(Column::Expr {
                    header: v[0].into(),
                    expr,
                    fmt: Fmt::parse(v[2])?,
                });
            }
            "--range" => {
                let v = take(&mut it, flag, 3)?;
                cols.push(Column::Range {
                    header: v[0].into(),
                    field: v[1].into(),
                    fmt: Fmt::parse(v[2])?,
                });
            }
            _ => return Err(format!("table: unknown option {flag:?}")),
        }
    }
    let all = record::read(c.file)?;
    let ids = report::ids(&all, &ids);
    Ok(show(&report::table(&all, &c.of, &ids, &label, &cols), c.md))
}

fn ratios(rest: &[String]) -> Result<String, String> {
    let (file, rest) = rest.split_first().ok_or("ratios FILE ...")?;
    let mut c = Common {
        file,
        of: Of::Rounds,
        md: false,
    };
    let (mut field, mut fmt, mut title) = ("rps".to_owned(), Fmt::parse("2")?, "ratio".to_owned());
    let (mut cols, mut rows) = (Vec::new(), Vec::new());
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--of" => c.of = Of::parse(one(&mut it, flag)?)?,
            "--md" => c.md = true,
            "--field" => one(&mut it, flag)?.clone_into(&mut field),
            "--fmt" => fmt = Fmt::parse(one(&mut it, flag)?)?,
            "--title" => one(&mut it, flag)?.clone_into(&mut title),
            "--col" => {
                let v = take(&mut it, flag, 2)?;
                cols.push((v[0].to_owned(), v[1].to_owned()));
            }
            "--row" => {
                let v = take(&mut it, flag, 3)?;
                rows.push(RatioRow {
                    label: v[0].into(),
                    expr: v[1].into(),
                    goal: Goal::parse(v[2])?,
                });
            }
            _ => return Err(format!("ratios: unknown option {flag:?}")),
        }
    }
    if cols.is_empty() {
        cols.push(("ratio".to_owned(), String::new()));
    }
    let all = record::read(c.file)?;
    Ok(show(
        &report::ratios(&all, &c.of, &field, &title, &cols, &rows, fmt)?,
        c.md,
    ))
}

fn callgrind(rest: &[String]) -> Result<u64, String> {
    let (mut per, mut total) = (1, 0);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if a == "--per" {
            per = one(&mut it, a)?.parse().map_err(|_| "--per N")?;
            continue;
        }
        let text = std::fs::read_to_string(a).map_err(|e| format!("{a}: {e}"))?;
        total += parse::callgrind_total(&text).ok_or(format!("{a}: no callgrind totals"))?;
    }
    if per == 0 {
        return Err("--per must be above 0".into());
    }
    Ok(total / per)
}
