//! `--plot FILE.svg`: per rule, the units admitted and denied and the debt
//! (or, for a concurrency rule, the slots held) over the trace's time
//! (docs/replay.md, "Plot").
//!
//! The time axis is cut into at most [`MAX_BUCKETS`] buckets whose width
//! doubles as the trace goes on, so the picture of a day of traffic is as
//! large as that of a minute: a few hundred points per series.

use std::path::Path;

use plotters::prelude::*;
use tollgate::{Algorithm, Rule};

use super::ops::Done;

/// The most buckets the time axis is cut into.
pub const MAX_BUCKETS: usize = 400;

/// Each chart's size in pixels (one per rule, stacked).
const CHART: (u32, u32) = (1000, 300);

/// The admitted series' colour.
const ADMITTED: RGBColor = RGBColor(0x1b, 0x9e, 0x77);
/// The denied series' colour.
const DENIED: RGBColor = RGBColor(0xd9, 0x5f, 0x02);
/// The debt (or slots held) series' colour.
const LEVEL: RGBColor = RGBColor(0x75, 0x70, 0xb3);

/// One bucket of one rule.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Units admitted in the bucket.
    admitted: u64,
    /// Units denied in the bucket.
    denied: u64,
    /// The largest debt a row of the bucket reported (a concurrency rule:
    /// the most slots one key held after a row).
    level: u64,
    /// Whether a row of the bucket reported a level.
    reported: bool,
}

impl Bucket {
    fn merge(self, other: Bucket) -> Bucket {
        Bucket {
            admitted: self.admitted.saturating_add(other.admitted),
            denied: self.denied.saturating_add(other.denied),
            level: self.level.max(other.level),
            reported: self.reported || other.reported,
        }
    }
}

/// The plot's data, gathered row by row while the trace replays.
#[derive(Debug, Clone)]
pub struct Plot {
    /// The first row's `t_ms`: the time axis starts there.
    origin: Option<u64>,
    /// Milliseconds per bucket (a power of two).
    width: u64,
    /// Per rule (by its position in the config): its buckets, from the
    /// origin; `None` for a rule no row named.
    rules: Vec<Option<Vec<Bucket>>>,
}

impl Plot {
    /// An empty plot for `rules` rules.
    #[must_use]
    pub fn new(rules: usize) -> Self {
        Self {
            origin: None,
            width: 1,
            rules: vec![None; rules],
        }
    }

    /// Adds a row of rule `index` (`rule`) at `t_ms` that ended in `done`.
    pub(super) fn add(&mut self, index: usize, rule: &Rule, t_ms: u64, done: &Done) {
        let origin = *self.origin.get_or_insert(t_ms);
        let offset = t_ms.saturating_sub(origin);
        while offset / self.width >= MAX_BUCKETS as u64 {
            self.widen();
        }
        let at = usize::try_from(offset / self.width).unwrap_or(MAX_BUCKETS - 1);
        let buckets = self.rules[index].get_or_insert_with(Vec::new);
        if buckets.len() <= at {
            buckets.resize(at + 1, Bucket::default());
        }
        let level = if rule.algorithm() == Algorithm::Concurrency {
            Some(rule.limit().saturating_sub(done.decision.remaining))
        } else {
            done.debt
        };
        let b = &mut buckets[at];
        b.admitted = b.admitted.saturating_add(done.admitted);
        b.denied = b.denied.saturating_add(done.denied);
        if let Some(level) = level {
            b.level = b.level.max(level);
            b.reported = true;
        }
    }

    /// Doubles the bucket width, merging pairs of buckets.
    fn widen(&mut self) {
        self.width = self.width.saturating_mul(2);
        for buckets in self.rules.iter_mut().flatten() {
            *buckets = buckets
                .chunks(2)
                .map(|pair| pair.iter().fold(Bucket::default(), |a, &b| a.merge(b)))
                .collect();
        }
    }

    /// Draws the plot of `rules` (the limiter's, in the order [`Plot::new`]
    /// was sized for) as SVG into `path`.
    ///
    /// # Errors
    /// The drawing or the file write failed (the message says which).
    pub fn draw(&self, rules: &[Rule], path: &Path) -> Result<(), String> {
        let mut svg = String::new();
        self.render(rules, &mut svg)
            .map_err(|e| format!("cannot draw the plot: {e}"))?;
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    fn render(&self, rules: &[Rule], svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
        let drawn: Vec<(&Rule, &[Bucket])> = rules
            .iter()
            .zip(&self.rules)
            .filter_map(|(r, b)| Some((r, b.as_deref()?)))
            .collect();
        let count = u32::try_from(drawn.len().max(1)).unwrap_or(u32::MAX);
        let size = (CHART.0, CHART.1.saturating_mul(count));
        let root = SVGBackend::with_string(svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        if drawn.is_empty() {
            root.titled("tollgate replay: the trace has no rows", ("sans-serif", 20))?;
            root.present()?;
            return Ok(());
        }
        let buckets = drawn.iter().map(|(_, b)| b.len()).max().unwrap_or(1);
        let secs = |i: usize| (i as f64) * (self.width as f64) / 1000.0;
        let x_max = secs(buckets).max(0.001);
        for (area, (rule, series)) in root.split_evenly((drawn.len(), 1)).iter().zip(&drawn) {
            let concurrency = rule.algorithm() == Algorithm::Concurrency;
            let level_name = if concurrency { "slots held" } else { "debt" };
            let filled;
            let series: &[Bucket] = if concurrency {
                filled = carried(series);
                &filled
            } else {
                series
            };
            let y_max = series
                .iter()
                .map(|b| b.admitted.max(b.denied).max(b.level))
                .max()
                .unwrap_or(0)
                .max(1) as f64
                * 1.1;
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{} ({})", rule.name(), rule.algorithm()),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
            chart
                .configure_mesh()
                .x_desc("seconds since the trace's first row")
                .y_desc(format!("units (admitted, denied: per {} ms)", self.width))
                .draw()?;
            let line = |f: fn(&Bucket) -> u64| {
                series
                    .iter()
                    .enumerate()
                    .map(move |(i, b)| (secs(i), f(b) as f64))
            };
            for (name, colour, value) in [
                (
                    "admitted",
                    ADMITTED,
                    (|b: &Bucket| b.admitted) as fn(&Bucket) -> u64,
                ),
                ("denied", DENIED, |b: &Bucket| b.denied),
                (level_name, LEVEL, |b: &Bucket| b.level),
            ] {
                chart
                    .draw_series(LineSeries::new(line(value), colour.stroke_width(2)))?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
        Ok(())
    }
}

/// A concurrency rule's buckets with the slots held carried over buckets
/// where no row reported them: slots stay held between rows (a lease
/// that runs out between them shows at the next row).
fn carried(series: &[Bucket]) -> Vec<Bucket> {
    let mut last = 0;
    series
        .iter()
        .map(|b| {
            if b.reported {
                last = b.level;
                *b
            } else {
                Bucket { level: last, ..*b }
            }
        })
        .collect()
}
