//! The results file: one line per measured run (`id`, `round`, `label` and
//! its figures), tab-separated `key=value` words, appended by `benchstat
//! run`; a later line of the same `id` and `round` (`benchstat put`) adds or
//! replaces figures.
//!
//! Raw figures are what was counted (`n` requests, CPU seconds `srv_s`,
//! `aux_s`, `load_s`, the machine's `busy_s`, `all_s`, `steal_s`, `bad`
//! answers). The per-request figures the tables show are derived when read,
//! so a count put in after the run (redis-server's own) still applies:
//! `X` is µs per request of `X_s` (`srv`, `srv_sys`, `aux`, `aux_sys`,
//! `load`), `non2xx` the share of `bad` answers (%), `other` the share of
//! the machine that no process of the run took (%), `steal` the
//! hypervisor's (%).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;

/// One run: its figures by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Record {
    /// Every `key=value` of its lines, `id`, `round` and `label` included.
    pub(crate) fields: BTreeMap<String, String>,
}

impl Record {
    /// The run's id (`mem.open.1`).
    pub(crate) fn id(&self) -> &str {
        self.text("id").unwrap_or("")
    }

    /// Its round (1, 2...).
    pub(crate) fn round(&self) -> u32 {
        self.text("round").and_then(|r| r.parse().ok()).unwrap_or(0)
    }

    /// A figure as written.
    pub(crate) fn text(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    fn raw(&self, key: &str) -> Option<f64> {
        self.text(key)?.parse().ok()
    }

    /// A figure as a number, raw or derived (see the module's doc).
    pub(crate) fn num(&self, key: &str) -> Option<f64> {
        if let Some(v) = self.raw(key) {
            return Some(v);
        }
        let per_request = |v: f64| self.raw("n").filter(|n| *n > 0.0).map(|n| v / n);
        let share = |v: f64| {
            self.raw("all_s")
                .filter(|a| *a > 0.0)
                .map(|a| 100.0 * v / a)
        };
        match key {
            "non2xx" => per_request(100.0 * self.raw("bad")?),
            "steal" => share(self.raw("steal_s")?),
            "other" => {
                let mine: f64 = ["srv_s", "aux_s", "load_s"]
                    .iter()
                    .filter_map(|k| self.raw(k))
                    .sum();
                share((self.raw("busy_s")? - mine).max(0.0))
            }
            _ => per_request(1e6 * self.raw(&format!("{key}_s"))?),
        }
    }
}

/// Parses one line (`key=value` words separated by tabs).
pub(crate) fn parse_line(line: &str) -> Record {
    let fields = line
        .split('\t')
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Record { fields }
}

/// Writes one line; tabs and line ends in values become spaces.
pub(crate) fn format_line(fields: &BTreeMap<String, String>) -> String {
    // id, round and label first, for whoever reads the file.
    let first = ["id", "round", "label"];
    let ordered = first
        .iter()
        .filter_map(|k| fields.get_key_value(*k))
        .chain(fields.iter().filter(|(k, _)| !first.contains(&k.as_str())));
    let words: Vec<String> = ordered
        .map(|(k, v)| format!("{k}={}", v.replace(['\t', '\n', '\r'], " ")))
        .collect();
    words.join("\t")
}

/// The records of a results text, lines of one id and round merged, in
/// the order their first lines came.
pub(crate) fn parse(text: &str) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let rec = parse_line(line);
        match out
            .iter_mut()
            .find(|r| r.id() == rec.id() && r.round() == rec.round())
        {
            Some(r) => r.fields.extend(rec.fields),
            None => out.push(rec),
        }
    }
    out
}

/// Reads a results file (missing: no records).
pub(crate) fn read(path: &str) -> Result<Vec<Record>, String> {
    match fs::read_to_string(path) {
        Ok(t) => Ok(parse(&t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{path}: {e}")),
    }
}

/// Appends one line to a results file.
pub(crate) fn append(path: &str, fields: &BTreeMap<String, String>) -> Result<(), String> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    writeln!(f, "{}", format_line(fields)).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> Record {
        parse_line(&line.replace(' ', "\t"))
    }

    #[test]
    fn per_request_figures_are_derived_from_raw_counts() {
        let r = rec(
            "id=a round=1 n=1000 srv_s=0.02 aux_s=0.005 load_s=0.01 busy_s=0.05 all_s=0.1 steal_s=0.001 bad=10",
        );
        assert!((r.num("srv").unwrap() - 20.0).abs() < 1e-9);
        assert!((r.num("aux").unwrap() - 5.0).abs() < 1e-9);
        assert!((r.num("non2xx").unwrap() - 1.0).abs() < 1e-9);
        assert!((r.num("other").unwrap() - 15.0).abs() < 1e-9);
        assert!((r.num("steal").unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(r.num("srv_sys"), None);
    }

    #[test]
    fn other_is_never_below_zero() {
        let r = rec("id=a round=1 n=1 srv_s=2 busy_s=1 all_s=4");
        assert_eq!(r.num("other"), Some(0.0));
    }

    #[test]
    fn a_later_line_of_the_same_run_adds_to_it() {
        let text = "id=a\tround=1\tn=5\nid=b\tround=1\tn=7\nid=a\tround=1\tcalls=3\tn=6\n";
        let r = parse(text);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].num("n"), r[0].num("calls")), (Some(6.0), Some(3.0)));
    }

    #[test]
    fn a_line_written_reads_back() {
        let mut f = BTreeMap::new();
        f.insert("label".to_owned(), "tollgate\tmemory".to_owned());
        f.insert("id".to_owned(), "m".to_owned());
        f.insert("round".to_owned(), "2".to_owned());
        f.insert("n".to_owned(), "12".to_owned());
        let line = format_line(&f);
        assert!(line.starts_with("id=m\tround=2\tlabel=tollgate memory\t"));
        let r = parse_line(&line);
        assert_eq!(
            (r.id(), r.round(), r.text("label")),
            ("m", 2, Some("tollgate memory"))
        );
    }
}
