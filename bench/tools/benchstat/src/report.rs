//! The tables a bench script prints: one row per target (`table`), or
//! ratios and differences between targets, each against its goal
//! (`ratios`); aligned text, or Markdown for bench/README.md.

use crate::record::Record;
use crate::stats::{self, Expr, Goal, Of};

/// How a number is written: decimals, and `%` after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fmt {
    decimals: usize,
    percent: bool,
}

impl Fmt {
    /// `2`, `0`, `1%`.
    pub(crate) fn parse(text: &str) -> Result<Fmt, String> {
        let (d, percent) = text.strip_suffix('%').map_or((text, false), |d| (d, true));
        let decimals = d
            .parse()
            .map_err(|_| format!("bad decimals {text:?} (2, 0, 1%)"))?;
        Ok(Fmt { decimals, percent })
    }

    /// The number written out.
    pub(crate) fn show(self, v: f64) -> String {
        format!(
            "{v:.*}{}",
            self.decimals,
            if self.percent { "%" } else { "" }
        )
    }
}

/// A column of a per-target table.
#[derive(Clone, Debug)]
pub(crate) enum Column {
    /// An expression of the row's figures (`srv`, `srv + aux`, `calls / n`).
    Expr {
        header: String,
        expr: Expr,
        fmt: Fmt,
    },
    /// `least..most` of one figure over the rounds.
    Range {
        header: String,
        field: String,
        fmt: Fmt,
    },
}

/// Does `id` match `pattern`, where `*` stands for any run of characters?
pub(crate) fn glob(pattern: &str, id: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == id,
        Some((head, tail)) => {
            id.starts_with(head)
                && (0..=id.len() - head.len()).any(|i| {
                    id.is_char_boundary(head.len() + i) && glob(tail, &id[head.len() + i..])
                })
        }
    }
}

/// The targets' ids in the order they were first measured, or grouped by
/// the patterns given (each pattern's matches in that order).
pub(crate) fn ids(all: &[Record], patterns: &[String]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for r in all {
        if !seen.iter().any(|s| s == r.id()) {
            seen.push(r.id().to_owned());
        }
    }
    if patterns.is_empty() {
        return seen;
    }
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        for id in &seen {
            if glob(p, id) && !out.contains(id) {
                out.push(id.clone());
            }
        }
    }
    out
}

/// One row per target: its label, then the columns.
pub(crate) fn table(all: &[Record], of: &Of, ids: &[String], label: &str, cols: &[Column]) -> Grid {
    let mut header = vec![label.to_owned()];
    header.extend(cols.iter().map(|c| match c {
        Column::Expr { header, .. } | Column::Range { header, .. } => header.clone(),
    }));
    let mut rows = Vec::new();
    for id in ids {
        let runs = stats::runs(all, id);
        let shown = match of {
            Of::Best(by) => stats::best(&runs, by),
            Of::Rounds => None,
        }
        .or(runs.first().copied());
        let mut row = vec![shown.and_then(|r| r.text("label")).unwrap_or(id).to_owned()];
        for c in cols {
            row.push(match c {
                Column::Expr { expr, fmt, .. } => {
                    let text = expr.single().filter(|t| t.id.is_none()).and_then(|t| {
                        let v = shown?.text(t.field.as_deref()?)?;
                        v.parse::<f64>().is_err().then(|| v.to_owned())
                    });
                    text.or_else(|| stats::value(all, of, expr, id, "").map(|v| fmt.show(v)))
                        .unwrap_or_else(|| "-".into())
                }
                Column::Range { field, fmt, .. } => stats::spread(all, id, field).map_or_else(
                    || "-".into(),
                    |(lo, hi)| format!("{}..{}", fmt.show(lo), fmt.show(hi)),
                ),
            });
        }
        rows.push(row);
    }
    Grid { header, rows }
}

/// A row of a ratios table: a label, an expression with `{}` standing for
/// each column's suffix, and a goal.
#[derive(Clone, Debug)]
pub(crate) struct RatioRow {
    /// What the row compares.
    pub(crate) label: String,
    /// `mem.{} / tc.{}`, `proxy{}:p99 - direct{}:p99`.
    pub(crate) expr: String,
    /// Its goal, if it has one.
    pub(crate) goal: Option<Goal>,
}

/// Ratios (or differences) per column, with the worst of each row
/// against its goal: `met` or `MISSED`.
pub(crate) fn ratios(
    all: &[Record],
    of: &Of,
    field: &str,
    title: &str,
    cols: &[(String, String)],
    rows: &[RatioRow],
    fmt: Fmt,
) -> Result<Grid, String> {
    // The goal and worst columns only when a row has a goal.
    let goals = rows.iter().any(|r| r.goal.is_some());
    let mut header = vec![title.to_owned()];
    header.extend(goals.then(|| "goal".to_owned()));
    header.extend(cols.iter().map(|(h, _)| h.clone()));
    header.extend(goals.then(|| "worst".to_owned()));
    let mut out = Vec::new();
    for row in rows {
        let mut values = Vec::new();
        for (_, suffix) in cols {
            let expr = Expr::parse(&row.expr.replace("{}", suffix), true)?;
            values.push(stats::value(all, of, &expr, "", field));
        }
        let mut line = vec![row.label.clone()];
        line.extend(goals.then(|| row.goal.map(Goal::show).unwrap_or_default()));
        line.extend(
            values
                .iter()
                .map(|v| v.map_or_else(|| "-".into(), |v| fmt.show(v))),
        );
        let measured: Vec<f64> = values.iter().flatten().copied().collect();
        line.extend(goals.then(|| match row.goal {
            None => String::new(),
            Some(_) if measured.len() < values.len() => "not measured".into(),
            Some(g) => g.judge(&measured).map_or_else(String::new, |(w, ok)| {
                format!("{} {}", fmt.show(w), if ok { "met" } else { "MISSED" })
            }),
        }));
        out.push(line);
    }
    Ok(Grid { header, rows: out })
}

/// Cells to print.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Grid {
    /// Column headers.
    pub(crate) header: Vec<String>,
    /// Rows of cells.
    pub(crate) rows: Vec<Vec<String>>,
}

impl Grid {
    /// Aligned text: the first column to the left, the others to the right.
    pub(crate) fn text(&self) -> String {
        let n = self.header.len();
        let width = |i: usize| {
            std::iter::once(&self.header)
                .chain(&self.rows)
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        let line = |cells: &Vec<String>| {
            let parts: Vec<String> = (0..n)
                .map(|i| {
                    let c = cells.get(i).map_or("", String::as_str);
                    let w = widths[i];
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            parts.join("  ").trim_end().to_owned() + "\n"
        };
        std::iter::once(&self.header)
            .chain(&self.rows)
            .map(line)
            .collect()
    }

    /// A Markdown table.
    pub(crate) fn markdown(&self) -> String {
        let line = |cells: &Vec<String>| format!("| {} |\n", cells.join(" | "));
        let rule = format!("|{}\n", "---|".repeat(self.header.len()));
        line(&self.header) + &rule + &self.rows.iter().map(line).collect::<String>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::parse;

    const RUNS: &str = "id=mem.open\tround=1\tlabel=memory open\trps=100\tn=10\tsrv_s=0.0001\n\
                        id=tc.open\tround=1\tlabel=peer open\trps=50\tn=10\tsrv_s=0.0002\terrors=read 2\n\
                        id=mem.open\tround=2\tlabel=memory open\trps=90\tn=10\tsrv_s=0.0003\n\
                        id=tc.open\tround=2\tlabel=peer open\trps=100\tn=10\tsrv_s=0.0001\n";

    fn col(h: &str, e: &str, f: &str) -> Column {
        Column::Expr {
            header: h.into(),
            expr: Expr::parse(e, false).unwrap(),
            fmt: Fmt::parse(f).unwrap(),
        }
    }

    #[test]
    fn globs_match_any_run_of_characters() {
        assert!(glob("*.open.1", "mem.open.1"));
        assert!(glob("mem.*", "mem.closed.10000"));
        assert!(!glob("*.open.1", "mem.open.10000"));
        assert!(glob("a*b*c", "a-xx-b-yy-c"));
    }

    #[test]
    fn a_table_shows_medians_ranges_and_text() {
        let all = parse(RUNS);
        let ids = ids(&all, &["tc.*".into(), "*".into()]);
        assert_eq!(ids, vec!["tc.open", "mem.open"]);
        let cols = [
            col("req/s", "rps", "0"),
            col("srv us", "srv", "1"),
            Column::Range {
                header: "range".into(),
                field: "rps".into(),
                fmt: Fmt::parse("0").unwrap(),
            },
            col("errors", "errors", "0"),
        ];
        let g = table(&all, &Of::Rounds, &ids, "target", &cols);
        assert_eq!(g.rows[0], ["peer open", "75", "15.0", "50..100", "read 2"]);
        assert_eq!(g.rows[1], ["memory open", "95", "20.0", "90..100", "-"]);
        let best = table(&all, &Of::Best("rps".into()), &ids, "target", &cols);
        assert_eq!(best.rows[0][1..3], ["100", "10.0"]);
    }

    #[test]
    fn ratios_judge_their_worst_column() {
        let all = parse(RUNS);
        let rows = [
            RatioRow {
                label: "memory / peer".into(),
                expr: "mem.{} / tc.{}".into(),
                goal: Goal::parse(">=1.2").unwrap(),
            },
            RatioRow {
                label: "against nobody".into(),
                expr: "mem.{} / x.{}".into(),
                goal: Goal::parse("<=1").unwrap(),
            },
        ];
        let cols = [("open".to_owned(), "open".to_owned())];
        let g = ratios(
            &all,
            &Of::Rounds,
            "rps",
            "ratio",
            &cols,
            &rows,
            Fmt::parse("2").unwrap(),
        )
        .unwrap();
        // per round 2.0 and 0.9: median 1.45
        assert_eq!(g.rows[0], ["memory / peer", ">=1.2", "1.45", "1.45 met"]);
        assert_eq!(g.rows[1], ["against nobody", "<=1", "-", "not measured"]);
        let plain = [RatioRow {
            label: "memory / peer".into(),
            expr: "mem.{} / tc.{}".into(),
            goal: None,
        }];
        let g = ratios(
            &all,
            &Of::Rounds,
            "rps",
            "ratio",
            &cols,
            &plain,
            Fmt::parse("2").unwrap(),
        )
        .unwrap();
        assert_eq!(g.header, ["ratio", "open"]);
        assert_eq!(g.rows[0], ["memory / peer", "1.45"]);
    }

    #[test]
    fn grids_print_as_aligned_text_and_markdown() {
        let g = Grid {
            header: vec!["a".into(), "bb".into()],
            rows: vec![vec!["long".into(), "1".into()]],
        };
        assert_eq!(g.text(), "a     bb\nlong   1\n");
        assert_eq!(g.markdown(), "| a | bb |\n|---|---|\n| long | 1 |\n");
    }
}
