//! `/metrics` in a stable order, every family with `# HELP` and `# TYPE`.
//! The exporter walks hash maps, so two scrapes can list families (and a
//! family's series) in different orders; dashboards do not care, but
//! diffs, tests and people reading the page do.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::catalog::{FAMILIES, Kind};

#[derive(Default)]
struct Block {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// `text` (Prometheus text format) with its families sorted by name, each
/// family's series sorted (a histogram's bucket, sum and count lines kept
/// together, in their order), the missing `# HELP` lines taken from
/// [`FAMILIES`], and each family of [`FAMILIES`] that has no series yet
/// listed by its `# HELP` and `# TYPE` lines alone.
#[must_use]
pub fn stable(text: &str) -> String {
    let mut blocks: BTreeMap<String, Block> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            current = name.to_owned();
            let block = blocks.entry(current.clone()).or_default();
            block.help.get_or_insert_with(|| line.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            current = words.next().unwrap_or_default().to_owned();
            let block = blocks.entry(current.clone()).or_default();
            block
                .kind
                .get_or_insert_with(|| words.next().unwrap_or_default().to_owned());
        } else if line.is_empty() || line.starts_with('#') {
        } else {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            // A sample of the family being read (a histogram's `_bucket`,
            // `_sum`, `_count`), or one with no TYPE line before it.
            if !name.starts_with(current.as_str()) || current.is_empty() {
                current = name.to_owned();
            }
            blocks
                .entry(current.clone())
                .or_default()
                .samples
                .push(line.to_owned());
        }
    }
    for &(name, kind, _) in FAMILIES {
        let block = blocks.entry(name.to_owned()).or_default();
        block.kind.get_or_insert_with(|| kind.as_str().to_owned());
    }
    let mut out = String::with_capacity(text.len() + 4096);
    for (name, block) in &mut blocks {
        match &block.help {
            Some(help) => out.push_str(help),
            None => match super::catalog::family(name) {
                Some((_, _, help)) => {
                    let _ = write!(out, "# HELP {name} {help}");
                }
                None => {
                    let _ = write!(out, "# HELP {name} {name}");
                }
            },
        }
        out.push('\n');
        let kind = block.kind.as_deref().unwrap_or("untyped");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        sort_samples(name, kind, &mut block.samples);
        for sample in &block.samples {
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

/// Sorts a family's sample lines; a histogram's or summary's lines go by
/// series (each series' lines end with its `_count`), kept in order.
fn sort_samples(name: &str, kind: &str, samples: &mut Vec<String>) {
    if kind != Kind::Histogram.as_str() && kind != "summary" {
        samples.sort();
        return;
    }
    let count = format!("{name}_count");
    let mut series: Vec<Vec<String>> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for line in samples.drain(..) {
        let ends = line.starts_with(&count);
        open.push(line);
        if ends {
            series.push(std::mem::take(&mut open));
        }
    }
    if !open.is_empty() {
        series.push(open);
    }
    series.sort_by(|a, b| a.last().cmp(&b.last()));
    samples.extend(series.into_iter().flatten());
}

/// `s` as a Prometheus label value: `\\`, `"` and line feeds escaped.
#[must_use]
pub fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::stable;

    #[test]
    fn families_and_series_are_sorted_and_a_histogram_stays_whole() {
        let a = "# TYPE b_total counter\nb_total{x=\"2\"} 1\nb_total{x=\"1\"} 2\n\n\
                 # HELP a_seconds A.\n# TYPE a_seconds histogram\n\
                 a_seconds_bucket{d=\"z\",le=\"1\"} 1\na_seconds_bucket{d=\"z\",le=\"+Inf\"} 1\n\
                 a_seconds_sum{d=\"z\"} 1\na_seconds_count{d=\"z\"} 1\n\
                 a_seconds_bucket{d=\"a\",le=\"1\"} 0\na_seconds_bucket{d=\"a\",le=\"+Inf\"} 0\n\
                 a_seconds_sum{d=\"a\"} 0\na_seconds_count{d=\"a\"} 0\n";
        let out = stable(a);
        let a_at = out.find("# HELP a_seconds A.").unwrap();
        let b_at = out.find("# HELP b_total").unwrap();
        assert!(a_at < b_at, "{out}");
        let series_a = out.find("a_seconds_bucket{d=\"a\",le=\"1\"}").unwrap();
        let inf_a = out.find("a_seconds_bucket{d=\"a\",le=\"+Inf\"}").unwrap();
        let series_z = out.find("a_seconds_bucket{d=\"z\",le=\"1\"}").unwrap();
        assert!(series_a < inf_a && inf_a < series_z, "{out}");
        assert!(out.find("b_total{x=\"1\"}") < out.find("b_total{x=\"2\"}"));
        // a family of the catalog with no series is listed anyway
        assert!(out.contains("# HELP tollgate_store_up "), "{out}");
        assert!(out.contains("# TYPE tollgate_store_up gauge\n"), "{out}");
    }

    #[test]
    fn the_order_does_not_depend_on_the_input_order() {
        let one = "# TYPE x gauge\nx 1\n# TYPE y gauge\ny{a=\"1\"} 1\ny{a=\"0\"} 1\n";
        let two = "# TYPE y gauge\ny{a=\"0\"} 1\ny{a=\"1\"} 1\n# TYPE x gauge\nx 1\n";
        assert_eq!(stable(one), stable(two));
    }
}
