//! Measuring one load run: wait for a quiet machine, count the CPU of the
//! servers under test, of what they lean on, of the load tool and of the
//! whole machine around the run, read the tool's output, append a record;
//! and the quiet-machine retries of a set of runs (`settle`).

use std::collections::BTreeMap;
use std::fs;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::procfs::{self, Machine, Ticks};
use crate::{parse, record};

/// Writes a line to stderr, as the scripts' own `log` does.
pub(crate) fn log(msg: &str) {
    eprintln!("# {msg}");
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The share of the machine busy between two samples, in %.
fn busy(a: Machine, b: Machine) -> u64 {
    let total = b.total.saturating_sub(a.total);
    (100 * b.busy.saturating_sub(a.busy))
        .checked_div(total)
        .unwrap_or(0)
}

/// The machine is shared (other engineers build on it): waits until the
/// cores have been under `BENCH_QUIET_BUSY` % busy (25) for a second, at
/// most `BENCH_QUIET_WAIT` seconds (60); the `other` figure of each run
/// then says how quiet the run itself was.
pub(crate) fn quiet() {
    let (limit, wait) = (
        env_num("BENCH_QUIET_BUSY", 25),
        env_num("BENCH_QUIET_WAIT", 60),
    );
    let mut waited = 0;
    loop {
        let a = procfs::machine();
        sleep(Duration::from_secs(1));
        let pct = busy(a, procfs::machine());
        if pct < limit {
            return;
        }
        if waited == 0 {
            log(&format!(
                "machine {pct}% busy: waiting up to {wait}s for it to quieten"
            ));
        }
        waited += 1;
        if waited >= wait {
            log(&format!("still {pct}% busy; measuring anyway"));
            return;
        }
    }
}

/// What `benchstat run` is told.
#[derive(Debug, Default)]
pub(crate) struct Run {
    /// The results file.
    pub(crate) results: String,
    /// The target's id, its round and label.
    pub(crate) id: String,
    /// Round number.
    pub(crate) round: String,
    /// What the tables call it.
    pub(crate) label: String,
    /// The servers under test (`srv`) and what they lean on (`aux`), with
    /// their descendants.
    pub(crate) sut: Vec<u32>,
    /// See `sut`.
    pub(crate) aux: Vec<u32>,
    /// The load tool's output kind (`parse::KINDS`).
    pub(crate) parse: String,
    /// Requests: a number, or the name of a figure of the output.
    pub(crate) count: Option<String>,
    /// Where the tool's stdout goes (stderr: the same with `.err`).
    pub(crate) out: Option<String>,
    /// Wait for a quiet machine first.
    pub(crate) quiet: bool,
    /// Figures to record as given (`best=-p99`).
    pub(crate) set: Vec<(String, String)>,
    /// The load tool and its arguments.
    pub(crate) command: Vec<String>,
}

fn ticks(pids: &[u32]) -> BTreeMap<u32, Ticks> {
    pids.iter()
        .filter_map(|&p| Some((p, procfs::process_ticks(p)?)))
        .collect()
}

/// Ticks used between two samples by the processes in both.
fn used(a: &BTreeMap<u32, Ticks>, b: &BTreeMap<u32, Ticks>) -> Ticks {
    let mut t = Ticks::default();
    for (pid, before) in a {
        if let Some(after) = b.get(pid) {
            t.all += after.all.saturating_sub(before.all);
            t.sys += after.sys.saturating_sub(before.sys);
        }
    }
    t
}

/// Runs the load tool once and appends its record.
pub(crate) fn run(r: &Run) -> Result<(), String> {
    let Some((program, args)) = r.command.split_first() else {
        return Err("run: no command after --".into());
    };
    if r.quiet {
        quiet();
    }
    log(&format!(
        "round {}: {}: {}",
        r.round,
        r.label,
        r.command.join(" ")
    ));
    let hz = procfs::hz();
    let temp = std::env::temp_dir().join(format!("benchstat-{}.out", std::process::id()));
    let out = r.out.clone().unwrap_or_else(|| temp.display().to_string());
    let file = |p: &str| fs::File::create(p).map_err(|e| format!("{p}: {e}"));
    let (sut, aux) = (
        procfs::with_descendants(&r.sut),
        procfs::with_descendants(&r.aux),
    );
    let (s0, a0, m0, l0) = (
        ticks(&sut),
        ticks(&aux),
        procfs::machine(),
        procfs::own_child_ticks(),
    );
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file(&out)?)
        .stderr(file(&format!("{out}.err"))?)
        .status()
        .map_err(|e| format!("{program}: {e}"))?;
    let secs = started.elapsed().as_secs_f64();
    let (m1, s1, a1, l1) = (
        procfs::machine(),
        ticks(&sut),
        ticks(&aux),
        procfs::own_child_ticks(),
    );
    let text = fs::read_to_string(&out).unwrap_or_default();
    let dump = || {
        let err = fs::read_to_string(format!("{out}.err")).unwrap_or_default();
        eprint!("{text}{err}");
    };
    if !status.success() {
        dump();
        return Err(format!(
            "{}: {} failed ({status})",
            r.label,
            r.command.join(" ")
        ));
    }
    let mut f = parse::output(&r.parse, &text).inspect_err(|_| dump())?;
    match r.count.as_deref() {
        None => {}
        Some(c) if c.parse::<f64>().is_ok() => {
            f.insert("n".into(), c.to_owned());
        }
        Some(field) => {
            let n = f
                .get(field)
                .cloned()
                .ok_or_else(|| format!("{}: no {field} in the output", r.label))?;
            f.insert("n".into(), n);
        }
    }
    if f.get("n").and_then(|n| n.parse::<f64>().ok()) == Some(0.0) {
        dump();
        return Err(format!("{}: nothing was answered", r.label));
    }
    let s = |t: u64| format!("{}", t as f64 / hz);
    let (ds, da, dl) = (
        used(&s0, &s1),
        used(&a0, &a1),
        Ticks {
            all: l1.all.saturating_sub(l0.all),
            sys: l1.sys.saturating_sub(l0.sys),
        },
    );
    let put = |f: &mut parse::Fields, k: &str, v: String| f.insert(k.to_owned(), v);
    put(&mut f, "id", r.id.clone());
    put(&mut f, "round", r.round.clone());
    put(&mut f, "label", r.label.clone());
    put(&mut f, "secs", format!("{secs:.3}"));
    if !r.sut.is_empty() {
        put(&mut f, "srv_s", s(ds.all));
        put(&mut f, "srv_sys_s", s(ds.sys));
    }
    if !r.aux.is_empty() {
        put(&mut f, "aux_s", s(da.all));
        put(&mut f, "aux_sys_s", s(da.sys));
    }
    put(&mut f, "load_s", s(dl.all));
    put(&mut f, "load_sys_s", s(dl.sys));
    put(&mut f, "busy_s", s(m1.busy.saturating_sub(m0.busy)));
    put(&mut f, "all_s", s(m1.total.saturating_sub(m0.total)));
    put(&mut f, "steal_s", s(m1.steal.saturating_sub(m0.steal)));
    for (k, v) in &r.set {
        put(&mut f, k, v.clone());
    }
    if r.out.is_none() {
        let _ = fs::remove_file(&out);
        let _ = fs::remove_file(format!("{out}.err"));
    }
    record::append(&r.results, &f)
}

/// What `settle` decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The kept attempt was added to the results.
    Kept,
    /// Measure the set again.
    Again,
}

/// The quiet-machine retry of a set of runs measured together (every
/// target of one scenario in one round): a build elsewhere that takes a
/// core during one target's run and not the other's decides a comparison
/// by itself. The set in `attempt` is kept when no run of it saw other
/// processes take more than `BENCH_MAX_OTHER` % of the cores (20), or on
/// the `BENCH_TRIES`-th try (3), then with the quietest attempt; otherwise
/// it is put aside (if quieter than the one aside) and measured again.
pub(crate) fn settle(
    attempt: &str,
    results: &str,
    try_no: u64,
    what: &str,
) -> Result<Settled, String> {
    let (max_other, tries) = (
        env_num("BENCH_MAX_OTHER", 20),
        env_num("BENCH_TRIES", 3).max(1),
    );
    let aside = format!("{attempt}.quietest");
    let worst = |path: &str| -> Result<Option<f64>, String> {
        let recs = record::read(path)?;
        Ok((!recs.is_empty()).then(|| {
            recs.iter()
                .filter_map(|r| r.num("other"))
                .fold(0.0, f64::max)
        }))
    };
    let other = worst(attempt)?.ok_or_else(|| format!("settle: {attempt} holds no run"))?;
    if worst(&aside)?.is_none_or(|o| other < o) {
        fs::copy(attempt, &aside).map_err(|e| format!("{aside}: {e}"))?;
    }
    if other <= max_other as f64 || try_no >= tries {
        let kept = fs::read_to_string(&aside).map_err(|e| format!("{aside}: {e}"))?;
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(results)
            .map_err(|e| format!("{results}: {e}"))?;
        std::io::Write::write_all(&mut f, kept.as_bytes())
            .map_err(|e| format!("{results}: {e}"))?;
        let _ = fs::remove_file(&aside);
        let _ = fs::remove_file(attempt);
        return Ok(Settled::Kept);
    }
    log(&format!(
        "{what}: other processes took up to {other:.0}% of the cores; measuring it again"
    ));
    let _ = fs::remove_file(attempt);
    Ok(Settled::Again)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &std::path::Path, other_busy: f64) {
        let line = format!("id=a\tround=1\tn=1\tbusy_s={other_busy}\tall_s=1\n");
        fs::write(path, line).unwrap();
    }

    #[test]
    fn a_noisy_attempt_is_measured_again_and_the_quietest_kept() {
        let dir = std::env::temp_dir().join(format!("benchstat-settle-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (attempt, results) = (dir.join("attempt"), dir.join("results"));
        let (a, r) = (attempt.to_str().unwrap(), results.to_str().unwrap());
        // 50% then 30% then 40% other: the third try keeps the 30% attempt.
        write(&attempt, 0.5);
        assert_eq!(settle(a, r, 1, "x").unwrap(), Settled::Again);
        write(&attempt, 0.3);
        assert_eq!(settle(a, r, 2, "x").unwrap(), Settled::Again);
        write(&attempt, 0.4);
        assert_eq!(settle(a, r, 3, "x").unwrap(), Settled::Kept);
        let kept = record::read(r).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].num("other"), Some(30.0));
        // a quiet attempt is kept at once
        write(&attempt, 0.1);
        assert_eq!(settle(a, r, 1, "x").unwrap(), Settled::Kept);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn busy_shares_are_of_the_ticks_between_samples() {
        let a = Machine {
            busy: 100,
            total: 400,
            steal: 0,
        };
        let b = Machine {
            busy: 150,
            total: 600,
            steal: 0,
        };
        assert_eq!(busy(a, b), 25);
        assert_eq!(busy(b, b), 0);
    }
}
