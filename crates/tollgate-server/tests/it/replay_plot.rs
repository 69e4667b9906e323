//! `tollgate replay --plot FILE.svg`: the file is SVG (parsed as XML), has
//! one chart per rule the trace named with its legend, its series follow
//! the trace (read back from the drawn lines' points, by colour), and a
//! long trace's picture stays as small as a short one's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

const CONFIG: &str = r#"
[[rules]]
name = "a"
algorithm = "fixed_window"
limit = 5
period = "1s"

[[rules]]
name = "b"
algorithm = "gcra"
limit = 100
period = "1s"

[[rules]]
name = "c"
algorithm = "concurrency"
limit = 1
lease = "1s"

[[rules]]
name = "unused"
algorithm = "gcra"
limit = 1
period = "1s"
"#;

/// The series' stroke colours (src/cmd/replay/plot.rs).
const ADMITTED: &str = "#1B9E77";
const DENIED: &str = "#D95F02";
const LEVEL: &str = "#7570B3";
/// Each rule's chart is this many pixels high, stacked top to bottom.
const CHART_HEIGHT: f64 = 300.0;
/// The most buckets (points per series).
const MAX_BUCKETS: usize = 400;

fn replay(dir: &TempDir, trace: &str, plot: &Path) -> Output {
    std::fs::write(dir.path().join("tollgate.toml"), CONFIG).expect("write config");
    let trace_path = dir.path().join("trace.csv");
    std::fs::write(&trace_path, trace).expect("write trace");
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--config")
        .arg(dir.path().join("tollgate.toml"))
        .arg("--trace")
        .arg(&trace_path)
        .arg("--out")
        .arg(dir.path().join("out.csv"))
        .arg("--plot")
        .arg(plot)
        .output()
        .expect("run tollgate")
}

/// One drawn line: its colour and points.
#[derive(Debug)]
struct Line {
    stroke: String,
    points: Vec<(f64, f64)>,
}

/// A parsed plot: its texts and its lines.
struct Svg {
    texts: Vec<String>,
    lines: Vec<Line>,
}

fn parse(path: &PathBuf) -> Svg {
    let text = std::fs::read_to_string(path).expect("read the plot");
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let texts = root
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_owned())
        .collect();
    let lines = root
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| Line {
            stroke: n.attribute("stroke").unwrap_or("").to_ascii_uppercase(),
            points: n
                .attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    (x.parse().expect("x"), y.parse().expect("y"))
                })
                .collect(),
        })
        .collect();
    Svg { texts, lines }
}

impl Svg {
    /// The data line of `stroke` in chart `chart` (0 = top): the one with
    /// more than the legend sample's two points.
    fn series(&self, chart: usize, stroke: &str) -> &Line {
        let top = chart as f64 * CHART_HEIGHT;
        self.lines
            .iter()
            .find(|l| {
                l.stroke == stroke
                    && l.points.len() > 2
                    && l.points[0].1 >= top
                    && l.points[0].1 < top + CHART_HEIGHT
            })
            .unwrap_or_else(|| panic!("no {stroke} series in chart {chart}"))
    }

    fn count(&self, text: &str) -> usize {
        self.texts.iter().filter(|t| *t == text).count()
    }
}

impl Line {
    /// How far the line rises above its lowest point, summed over its
    /// points (pixels): proportional to the units it draws.
    fn area(&self) -> f64 {
        let base = self.points.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        self.points.iter().map(|p| base - p.1).sum()
    }

    fn is_flat(&self) -> bool {
        self.points.iter().all(|p| p.1 == self.points[0].1)
    }
}

/// Rule a: 10 cost-1 checks a second for 10 s, 5 admitted and 5 denied in
/// every window. Rule b: charges only (never denied), 300 units at 5 s
/// against 100 a second: debt. Rule c: one slot, acquired, a second
/// acquire denied, released.
fn trace() -> String {
    let mut out = String::from("t_ms,rule,key,cost,op\n");
    for i in 0..100u64 {
        let t = i * 100;
        writeln!(out, "{t},a,k,1,check").expect("write");
        if i % 10 == 0 {
            let cost = if i == 50 { 300 } else { 10 };
            writeln!(out, "{t},b,k,{cost},charge").expect("write");
        }
        match i {
            20 => writeln!(out, "{t},c,k,1,acquire").expect("write"),
            21 => writeln!(out, "{t},c,k,1,acquire").expect("write"),
            25 => writeln!(out, "{t},c,k,,release").expect("write"),
            _ => {}
        }
    }
    out
}

#[test]
fn the_plot_is_svg_with_a_chart_and_legend_per_rule_that_follow_the_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plot = dir.path().join("plot.svg");
    let out = replay(&dir, &trace(), &plot);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = parse(&plot);
    // One chart per rule the trace named, in config order, named by rule
    // and algorithm; none for the rule it did not name.
    for caption in ["a (fixed_window)", "b (gcra)", "c (concurrency)"] {
        assert_eq!(svg.count(caption), 1, "{caption} in {:?}", svg.texts);
    }
    assert!(!svg.texts.iter().any(|t| t.starts_with("unused")));
    assert_eq!(svg.count("admitted"), 3);
    assert_eq!(svg.count("denied"), 3);
    assert_eq!(svg.count("debt"), 2, "rules a and b");
    assert_eq!(svg.count("slots held"), 1, "rule c");

    // a: as many units denied as admitted (50 each), and no debt.
    let (admitted, denied) = (svg.series(0, ADMITTED), svg.series(0, DENIED));
    assert!(!admitted.is_flat() && !denied.is_flat());
    let ratio = admitted.area() / denied.area();
    assert!((0.95..1.05).contains(&ratio), "admitted/denied {ratio}");
    assert!(svg.series(0, LEVEL).is_flat(), "checks carry no debt");
    // b: charges are never denied, and the 300-unit one leaves debt.
    assert!(svg.series(1, DENIED).is_flat());
    assert!(!svg.series(1, ADMITTED).is_flat());
    assert!(!svg.series(1, LEVEL).is_flat(), "the big charge's debt");
    // c: one slot held for a while, one acquire denied.
    assert!(!svg.series(2, LEVEL).is_flat());
    assert!(!svg.series(2, DENIED).is_flat());
    // The charts are stacked: the third ends within the picture.
    assert!(
        svg.series(2, LEVEL)
            .points
            .iter()
            .all(|p| p.1 < 3.0 * CHART_HEIGHT)
    );
}

#[test]
fn a_long_trace_plots_as_small_as_a_short_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let short_plot = dir.path().join("short.svg");
    assert!(replay(&dir, &trace(), &short_plot).status.success());
    // A day of rule a, one check every 432 ms: 200,000 rows.
    let mut long = String::from("t_ms,rule,key,cost\n");
    for i in 0..200_000u64 {
        writeln!(long, "{},a,k{},1", i * 432, i % 7).expect("write");
    }
    let long_plot = dir.path().join("long.svg");
    let out = replay(&dir, &long, &long_plot);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let size = |p: &Path| std::fs::metadata(p).expect("plot").len();
    let (short, long_size) = (size(&short_plot), size(&long_plot));
    assert!(
        long_size < 200_000,
        "a day's plot is {long_size} bytes (a 10 s trace's: {short})"
    );
    let svg = parse(&long_plot);
    assert_eq!(svg.count("a (fixed_window)"), 1);
    for stroke in [ADMITTED, DENIED, LEVEL] {
        let n = svg.series(0, stroke).points.len();
        assert!(
            (MAX_BUCKETS / 2..=MAX_BUCKETS).contains(&n),
            "{stroke}: {n} points"
        );
    }
    // 7 keys, one check each 432 ms, limit 5 a second per key: all admitted.
    assert!(svg.series(0, DENIED).is_flat());
}

#[test]
fn plot_edge_cases() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A trace with no rows still gives an SVG, saying so.
    let plot = dir.path().join("empty.svg");
    let out = replay(&dir, "t_ms,rule,key\n", &plot);
    assert!(out.status.success());
    let svg = parse(&plot);
    assert!(
        svg.texts.iter().any(|t| t.contains("no rows")),
        "{:?}",
        svg.texts
    );
    // --plot naming the trace is refused, and the trace is left alone.
    let trace_path = dir.path().join("trace.csv");
    let out = replay(&dir, "t_ms,rule,key\n0,a,k\n", &trace_path);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is the trace or the output"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&trace_path).expect("trace"),
        "t_ms,rule,key\n0,a,k\n"
    );
    // A bad row stops the replay before any plot is drawn.
    let plot = dir.path().join("bad.svg");
    let out = replay(&dir, "t_ms,rule,key\n0,nope,k\n", &plot);
    assert!(!out.status.success());
    assert!(!plot.exists());
}
