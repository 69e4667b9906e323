//! The standard `process_*` series (as the Prometheus client libraries
//! export them), read from `/proc` at each scrape: nothing is kept or
//! recorded between scrapes. Off Linux, or where `/proc` is not mounted,
//! the series are absent (their families stay listed, empty).

use std::fmt::Write as _;

/// `process_cpu_seconds_total`: user and system CPU time.
pub const CPU: &str = "process_cpu_seconds_total";
/// `process_resident_memory_bytes`.
pub const RESIDENT: &str = "process_resident_memory_bytes";
/// `process_virtual_memory_bytes`.
pub const VIRTUAL: &str = "process_virtual_memory_bytes";
/// `process_open_fds`.
pub const OPEN_FDS: &str = "process_open_fds";
/// `process_start_time_seconds`: Unix time the process started.
pub const START_TIME: &str = "process_start_time_seconds";

/// Clock ticks per second in `/proc/*/stat`: `USER_HZ`, 100 on every
/// architecture Linux runs tollgate on (`sysconf` would need `unsafe`,
/// which the workspace forbids).
const TICKS: f64 = 100.0;

/// The sample lines of the process series that can be read now (no
/// HELP/TYPE: [`super::text::stable`] adds them from the catalog).
#[must_use]
pub fn lines() -> String {
    let mut out = String::new();
    if let Some((cpu, start_ticks)) = stat() {
        let _ = writeln!(out, "{CPU} {cpu}");
        if let Some(boot) = boot_time() {
            let _ = writeln!(out, "{START_TIME} {}", boot + start_ticks / TICKS);
        }
    }
    if let Some(bytes) = status_kb("VmRSS:") {
        let _ = writeln!(out, "{RESIDENT} {bytes}");
    }
    if let Some(bytes) = status_kb("VmSize:") {
        let _ = writeln!(out, "{VIRTUAL} {bytes}");
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        // the directory handle read here is one of them; not counted
        let _ = writeln!(out, "{OPEN_FDS} {}", fds.count().saturating_sub(1));
    }
    out
}

/// CPU seconds (utime + stime) and the start time in ticks since boot,
/// from `/proc/self/stat`.
fn stat() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // the command name, field 2, may hold spaces and parentheses: the
    // fields counted start after its last `)`
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields 14, 15 and 22 of proc(5); `rest` starts at field 3
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(((field(14)? + field(15)?) / TICKS, field(22)?))
}

/// Boot time (Unix seconds), the `btime` line of `/proc/stat`.
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("btime "))?;
    line["btime ".len()..].trim().parse().ok()
}

/// A size line of `/proc/self/status` in bytes: `VmRSS:` (resident set
/// size) or `VmSize:` (virtual memory size).
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn every_process_series_is_read_on_linux() {
        let text = super::lines();
        for name in [
            super::CPU,
            super::RESIDENT,
            super::VIRTUAL,
            super::OPEN_FDS,
            super::START_TIME,
        ] {
            let line = text.lines().find(|l| l.starts_with(name)).expect(name);
            let value: f64 = line[name.len() + 1..].parse().unwrap();
            // CPU time may still read 0 in a young process
            assert!(value >= 0.0, "{line}");
            assert!(value > 0.0 || name == super::CPU, "{line}");
        }
    }
}
