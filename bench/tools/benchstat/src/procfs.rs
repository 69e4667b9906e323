//! CPU time and memory from `/proc`: of processes (every thread, and their
//! descendants), of the machine, and of the children this tool waited for.

use std::collections::BTreeSet;
use std::fs;

/// User and system clock ticks of one process (all its threads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ticks {
    /// utime + stime.
    pub(crate) all: u64,
    /// stime: the kernel's share (sockets, wake-ups).
    pub(crate) sys: u64,
}

/// The fields of a `/proc/PID/stat` line after `(comm)`, numbered as in
/// proc(5) from field 3 (`state`) on: `rest[0]` is field 3.
///
/// The command name may hold spaces and parentheses (`1 (a (b) c) S ...`),
/// so the name ends at the LAST `)` of the line.
pub(crate) fn stat_fields(line: &str) -> Option<Vec<&str>> {
    let (_, rest) = line.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// Field `n` (1-based, as proc(5) numbers them) of a `/proc/PID/stat` line.
fn stat_field(fields: &[&str], n: usize) -> Option<u64> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

/// utime (14) + stime (15) and stime of a `/proc/PID/stat` line.
pub(crate) fn parse_ticks(line: &str) -> Option<Ticks> {
    let f = stat_fields(line)?;
    let (user, sys) = (stat_field(&f, 14)?, stat_field(&f, 15)?);
    Some(Ticks {
        all: user + sys,
        sys,
    })
}

/// cutime (16) + cstime (17), and cstime: the children waited for.
pub(crate) fn parse_child_ticks(line: &str) -> Option<Ticks> {
    let f = stat_fields(line)?;
    let (user, sys) = (stat_field(&f, 16)?, stat_field(&f, 17)?);
    Some(Ticks {
        all: user + sys,
        sys,
    })
}

/// The parent pid (field 4) of a `/proc/PID/stat` line.
pub(crate) fn parse_ppid(line: &str) -> Option<u32> {
    let f = stat_fields(line)?;
    u32::try_from(stat_field(&f, 4)?).ok()
}

/// The ticks of one live process, `None` once it is gone.
pub(crate) fn process_ticks(pid: u32) -> Option<Ticks> {
    parse_ticks(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The ticks of the children this process has waited for (a load tool run
/// by `benchstat run`, with whatever it waited for in turn).
pub(crate) fn own_child_ticks() -> Ticks {
    fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|l| parse_child_ticks(&l))
        .unwrap_or_default()
}

/// `pids` and every live descendant of them (nginx's workers, a server's
/// helpers): what a server under test is made of.
pub(crate) fn with_descendants(pids: &[u32]) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if let Some(ppid) = parse_ppid(&stat) {
                parent_of.push((pid, ppid));
            }
        }
    }
    descendants(pids, &parent_of)
}

/// `roots` and the pids whose parent chain reaches one of them.
pub(crate) fn descendants(roots: &[u32], parent_of: &[(u32, u32)]) -> Vec<u32> {
    let mut set: BTreeSet<u32> = roots.iter().copied().collect();
    loop {
        let before = set.len();
        for &(pid, ppid) in parent_of {
            if set.contains(&ppid) {
                set.insert(pid);
            }
        }
        if set.len() == before {
            return set.into_iter().collect();
        }
    }
}

/// Clock ticks of the whole machine, from the `cpu` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Machine {
    /// Every state but idle and iowait.
    pub(crate) busy: u64,
    /// Every state.
    pub(crate) total: u64,
    /// Taken by the hypervisor.
    pub(crate) steal: u64,
}

/// The machine's ticks from the text of `/proc/stat`.
pub(crate) fn parse_machine(text: &str) -> Option<Machine> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is
    // already inside user).
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    Some(Machine {
        busy,
        total: busy + at(3) + at(4),
        steal: at(7),
    })
}

/// The machine's ticks now.
pub(crate) fn machine() -> Machine {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| parse_machine(&t))
        .unwrap_or_default()
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's USER_HZ, if
/// that cannot be asked).
pub(crate) fn hz() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `VmHWM` (the peak) and `VmRSS` (now) in KiB from a `/proc/PID/status` text.
pub(crate) fn parse_memory(status: &str) -> Option<(u64, u64)> {
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((kib("VmHWM:")?, kib("VmRSS:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real line's shape, with a name holding spaces and parentheses.
    const LINE: &str = "1234 (tokio (x) y) S 1 1234 1234 0 -1 4194560 2093 0 0 0 \
                        517 83 7 3 20 0 3 0 12345 123456789 2345 18446744073709551615";

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(parse_ticks(LINE), Some(Ticks { all: 600, sys: 83 }));
        assert_eq!(parse_child_ticks(LINE), Some(Ticks { all: 10, sys: 3 }));
        assert_eq!(parse_ppid(LINE), Some(1));
        assert_eq!(stat_fields(LINE).map(|f| f[0]), Some("S"));
    }

    #[test]
    fn a_truncated_stat_line_gives_nothing() {
        assert_eq!(parse_ticks("1234 (x) S 1 2"), None);
        assert_eq!(parse_ticks("garbage"), None);
    }

    #[test]
    fn the_machine_line_counts_busy_total_and_steal() {
        let text = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let m = parse_machine(text).unwrap();
        assert_eq!(
            m,
            Machine {
                busy: 167,
                total: 1187,
                steal: 7
            }
        );
    }

    #[test]
    fn descendants_follow_the_parent_chain() {
        let tree = [(10, 1), (11, 10), (12, 11), (20, 1), (21, 20)];
        assert_eq!(descendants(&[10], &tree), vec![10, 11, 12]);
        assert_eq!(descendants(&[11, 20], &tree), vec![11, 12, 20, 21]);
    }

    #[test]
    fn memory_peaks_and_resident_sizes_are_read() {
        let status = "Name:\ttollgate\nVmPeak:\t 9999 kB\nVmHWM:\t  5120 kB\nVmRSS:\t  4096 kB\n";
        assert_eq!(parse_memory(status), Some((5120, 4096)));
        assert_eq!(parse_memory("Name: x\n"), None);
    }
}
