//! Statistics over rounds: medians, a target's best round, figures of
//! expressions over runs (`mem.open.1:srv + floor.open.1:load / mem.open.1:srv`),
//! evaluated either on each target's best round or round by round and
//! then the median (the median of per-round ratios: both sides measured
//! minutes apart in one round, which the machine's swings move less than
//! a ratio of two best rounds).

use crate::record::Record;

/// The median (the mean of the middle two for an even count); `None` for none.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// One term: a figure of a run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Term {
    /// The run's id (`None`: the row's own, in a table).
    pub(crate) id: Option<String>,
    /// The figure (`None`: the `--field` of a ratios table).
    pub(crate) field: Option<String>,
}

/// `a + b`, `a + b / c + d` or `a - b`: terms separated by spaced
/// operators; `/` or `-` once, between two sums.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expr {
    num: Vec<Term>,
    op: Option<(char, Vec<Term>)>,
}

impl Expr {
    /// Parses an expression; `bare_is_id` says what a word without `:` names.
    pub(crate) fn parse(text: &str, bare_is_id: bool) -> Result<Expr, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "/" || *w == "-");
        let (left, op) = match at {
            Some(i) => {
                let op = words[i].chars().next().unwrap_or('/');
                (&words[..i], Some((op, &words[i + 1..])))
            }
            None => (&words[..], None),
        };
        let sum = |ws: &[&str]| -> Result<Vec<Term>, String> {
            let mut terms = Vec::new();
            for (i, w) in ws.iter().enumerate() {
                match (i % 2, *w) {
                    (1, "+") => {}
                    (0, w) if w != "+" && w != "/" && w != "-" => terms.push(term(w, bare_is_id)),
                    _ => return Err(format!("bad expression {text:?} (spaced +, one / or -)")),
                }
            }
            if terms.is_empty() || ws.len().is_multiple_of(2) {
                return Err(format!("bad expression {text:?}"));
            }
            Ok(terms)
        };
        Ok(Expr {
            num: sum(left)?,
            op: op.map(|(c, ws)| sum(ws).map(|t| (c, t))).transpose()?,
        })
    }

    /// The only term of a one-term expression (which may name text).
    pub(crate) fn single(&self) -> Option<&Term> {
        match (self.op.as_ref(), self.num.as_slice()) {
            (None, [t]) => Some(t),
            _ => None,
        }
    }

    /// The value, with `get` looking up each term; `None` when a term is
    /// missing or a divisor is not above zero.
    pub(crate) fn eval(&self, get: &dyn Fn(&Term) -> Option<f64>) -> Option<f64> {
        let sum = |ts: &[Term]| ts.iter().map(get).sum::<Option<f64>>();
        let a = sum(&self.num)?;
        match &self.op {
            None => Some(a),
            Some(('/', d)) => sum(d).filter(|b| *b > 0.0).map(|b| a / b),
            Some((_, d)) => sum(d).map(|b| a - b),
        }
    }
}

fn term(word: &str, bare_is_id: bool) -> Term {
    match word.split_once(':') {
        Some((id, f)) => Term {
            id: Some(id.to_owned()),
            field: Some(f.to_owned()),
        },
        None if bare_is_id => Term {
            id: Some(word.to_owned()),
            field: None,
        },
        None => Term {
            id: None,
            field: Some(word.to_owned()),
        },
    }
}

/// How a target's figure is taken over its rounds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Of {
    /// Its best round: the highest of a figure, or the lowest with `-`
    /// (`rps`, `-p99`); a run's own `best` figure, if any, overrides.
    Best(String),
    /// Each round on its own, then the median of what they give.
    Rounds,
}

impl Of {
    /// `best`, `best:-p99` or `rounds`/`median`.
    pub(crate) fn parse(text: &str) -> Result<Of, String> {
        match text.split_once(':') {
            _ if text == "rounds" || text == "median" => Ok(Of::Rounds),
            _ if text == "best" => Ok(Of::Best("rps".into())),
            Some(("best", f)) => Ok(Of::Best(f.to_owned())),
            _ => Err(format!(
                "unknown --of {text} (best, best:FIELD, best:-FIELD, rounds)"
            )),
        }
    }
}

/// The runs of one target, by id.
pub(crate) fn runs<'a>(all: &'a [Record], id: &str) -> Vec<&'a Record> {
    all.iter().filter(|r| r.id() == id).collect()
}

/// The best of a target's runs.
pub(crate) fn best<'a>(runs: &[&'a Record], default: &str) -> Option<&'a Record> {
    let key = |r: &Record| {
        let by = r.text("best").unwrap_or(default);
        let (sign, field) = by.strip_prefix('-').map_or((1.0, by), |f| (-1.0, f));
        r.num(field).map(|v| sign * v)
    };
    runs.iter()
        .copied()
        .filter(|r| key(r).is_some())
        .max_by(|a, b| key(a).unwrap_or(0.0).total_cmp(&key(b).unwrap_or(0.0)))
}

/// Every round number among the runs, ascending.
pub(crate) fn rounds(all: &[Record]) -> Vec<u32> {
    let mut r: Vec<u32> = all.iter().map(Record::round).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// An expression's value: on each target's best round, or the median of
/// its per-round values. `own` is the table row's id (for terms without
/// one), `field` the figure of terms without one.
pub(crate) fn value(all: &[Record], of: &Of, expr: &Expr, own: &str, field: &str) -> Option<f64> {
    let resolve = |t: &Term| {
        (
            t.id.clone().unwrap_or_else(|| own.to_owned()),
            t.field.clone().unwrap_or_else(|| field.to_owned()),
        )
    };
    match of {
        Of::Best(by) => expr.eval(&|t| {
            let (id, f) = resolve(t);
            best(&runs(all, &id), by)?.num(&f)
        }),
        Of::Rounds => {
            let per_round: Vec<f64> = rounds(all)
                .into_iter()
                .filter_map(|k| {
                    expr.eval(&|t| {
                        let (id, f) = resolve(t);
                        all.iter().find(|r| r.id() == id && r.round() == k)?.num(&f)
                    })
                })
                .collect();
            median(&per_round)
        }
    }
}

/// The least and the most of a figure over a target's rounds.
pub(crate) fn spread(all: &[Record], id: &str, field: &str) -> Option<(f64, f64)> {
    let v: Vec<f64> = runs(all, id).iter().filter_map(|r| r.num(field)).collect();
    let lo = v.iter().copied().reduce(f64::min)?;
    Some((lo, v.iter().copied().fold(lo, f64::max)))
}

/// A goal: at least or at most a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Goal {
    /// `>=X`: the worst value is the least.
    AtLeast(f64),
    /// `<=X`: the worst value is the most.
    AtMost(f64),
}

impl Goal {
    /// `>=1.2`, `<=0.3`; `-` or empty for none.
    pub(crate) fn parse(text: &str) -> Result<Option<Goal>, String> {
        let bad = || format!("bad goal {text:?} (>=X, <=X or -)");
        let num = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
        match text.trim() {
            "" | "-" => Ok(None),
            t if t.starts_with(">=") => Ok(Some(Goal::AtLeast(num(&t[2..])?))),
            t if t.starts_with("<=") => Ok(Some(Goal::AtMost(num(&t[2..])?))),
            _ => Err(bad()),
        }
    }

    /// The worst of some values, and whether it meets the goal.
    pub(crate) fn judge(self, values: &[f64]) -> Option<(f64, bool)> {
        match self {
            Goal::AtLeast(g) => values.iter().copied().reduce(f64::min).map(|w| (w, w >= g)),
            Goal::AtMost(g) => values.iter().copied().reduce(f64::max).map(|w| (w, w <= g)),
        }
    }

    /// As a goal column shows it.
    pub(crate) fn show(self) -> String {
        match self {
            Goal::AtLeast(g) => format!(">={g}"),
            Goal::AtMost(g) => format!("<={g}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::parse;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    // Two targets over three rounds; b's best round is its lowest p99.
    const RUNS: &str = "id=a\tround=1\trps=100\tp99=4\n\
                        id=b\tround=1\trps=50\tp99=2\tbest=-p99\n\
                        id=a\tround=2\trps=90\tp99=3\n\
                        id=b\tround=2\trps=80\tp99=5\tbest=-p99\n\
                        id=a\tround=3\trps=120\tp99=6\n\
                        id=b\tround=3\trps=40\tp99=1\tbest=-p99\n";

    #[test]
    fn the_median_of_per_round_ratios_is_not_the_ratio_of_best_rounds() {
        let all = parse(RUNS);
        let e = Expr::parse("a / b", true).unwrap();
        // per round: 2.0, 1.125, 3.0 -> 2.0
        assert_eq!(value(&all, &Of::Rounds, &e, "", "rps"), Some(2.0));
        // best of a: round 3 (120); b picks its own best by lowest p99: round 3 (40)
        assert_eq!(
            value(&all, &Of::Best("rps".into()), &e, "", "rps"),
            Some(3.0)
        );
    }

    #[test]
    fn differences_sums_and_own_fields() {
        let all = parse(RUNS);
        let d = Expr::parse("a:p99 - b:p99", true).unwrap();
        assert_eq!(value(&all, &Of::Rounds, &d, "", "rps"), Some(2.0)); // 2, -2, 5
        let s = Expr::parse("rps + p99", false).unwrap();
        assert_eq!(value(&all, &Of::Rounds, &s, "a", "-"), Some(104.0)); // 104, 93, 126
        assert_eq!(spread(&all, "b", "rps"), Some((40.0, 80.0)));
    }

    #[test]
    fn a_missing_side_or_a_zero_divisor_gives_nothing() {
        let all = parse("id=a\tround=1\trps=1\nid=z\tround=1\trps=0\n");
        assert_eq!(
            value(
                &all,
                &Of::Rounds,
                &Expr::parse("a / nobody", true).unwrap(),
                "",
                "rps"
            ),
            None
        );
        assert_eq!(
            value(
                &all,
                &Of::Rounds,
                &Expr::parse("a / z", true).unwrap(),
                "",
                "rps"
            ),
            None
        );
    }

    #[test]
    fn expressions_need_spaced_operators() {
        assert!(Expr::parse("a +", true).is_err());
        assert!(Expr::parse("a / / b", true).is_err());
        assert!(Expr::parse("", true).is_err());
        // an id may hold a dash
        let e = Expr::parse("reserve-settle / check", true).unwrap();
        let get = |t: &Term| {
            Some(if t.id.as_deref() == Some("check") {
                2.0
            } else {
                5.0
            })
        };
        assert_eq!(e.eval(&get), Some(2.5));
    }

    #[test]
    fn goals_judge_their_worst_value() {
        let at_least = Goal::parse(">=1.2").unwrap().unwrap();
        assert_eq!(at_least.judge(&[1.3, 1.1, 1.5]), Some((1.1, false)));
        let at_most = Goal::parse("<= 0.3").unwrap().unwrap();
        assert_eq!(at_most.judge(&[0.1, 0.2]), Some((0.2, true)));
        assert_eq!(Goal::parse("-").unwrap(), None);
        assert!(Goal::parse("~1").is_err());
    }
}
