//! Encoding script runs: a check's pairs, the six arguments of each, and
//! the per-connection cache of the bytes that depend on a rule alone.

use super::keys;
use super::resp::{Args, Encoder};
use super::scripts::{self, Script, Via, push_common_args};
use crate::rule::{Algorithm, Rule};
use crate::time::Micros;

/// A check of one (rule, key) pair, ready for a script.
#[derive(Clone)]
pub(super) struct Pair<'a> {
    pub(super) rule: &'a Rule,
    pub(super) key: Vec<u8>,
    pub(super) cost: u64,
}

/// The pairs at `members` of `pairs` (a Cluster slot's group).
pub(super) fn subset<'a>(pairs: &[Pair<'a>], members: &[usize]) -> Vec<Pair<'a>> {
    members.iter().map(|&i| pairs[i].clone()).collect()
}

/// The pairs of one script run: a single check (its Redis key written
/// straight into the command), or merged pairs with their keys built.
#[derive(Clone, Copy)]
pub(super) enum Pairs<'a, 'r> {
    One {
        rule: &'r Rule,
        key: &'a [u8],
        cost: u64,
    },
    Many(&'a [Pair<'r>]),
}

impl Pairs<'_, '_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Pairs::One { .. } => 1,
            Pairs::Many(pairs) => pairs.len(),
        }
    }

    fn rule_cost(&self, i: usize) -> (&Rule, u64) {
        match self {
            Pairs::One { rule, cost, .. } => (rule, *cost),
            Pairs::Many(pairs) => (pairs[i].rule, pairs[i].cost),
        }
    }

    fn key(&self, i: usize, prefix: &str, a: &mut impl Args) {
        match self {
            Pairs::One { rule, key, .. } => a.redis_key(prefix, rule, key),
            Pairs::Many(pairs) => a.bytes(&pairs[i].key),
        }
    }
}

/// The six script arguments of a pair (docs/semantics.md parameters precomputed
/// in exact integers; see `prelude.lua`).
fn push_pair_args(a: &mut impl Args, rule: &Rule, cost: u64) {
    let cost = clamp_cost(rule, cost);
    a.uint(u64::from(scripts::code(rule.algorithm())));
    a.uint(cost);
    if has_increment(rule.algorithm()) {
        a.uint(rule.increment_micros(cost));
    }
    push_rule_args(a, rule);
}

/// A cost above capacity is "never" whatever its size: keep it small.
pub(super) fn clamp_cost(rule: &Rule, cost: u64) -> u64 {
    cost.min(rule.capacity().saturating_add(1))
}

/// Whether the pair's third argument is the cost's increment (GCRA and
/// token bucket) rather than a rule constant.
fn has_increment(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket)
}

/// The pair arguments that depend on the rule alone (after the code, the
/// cost and any increment).
fn push_rule_args(a: &mut impl Args, rule: &Rule) {
    if has_increment(rule.algorithm()) {
        a.uint(rule.tau_micros());
        a.uint(rule.interval_micros());
        a.uint(rule.burst());
    } else {
        a.uint(rule.period_micros());
        a.uint(rule.limit());
        a.uint(0);
        a.uint(0);
    }
}

/// Most rules a connection keeps encoded.
const RULE_CACHE: usize = 16;

/// The encoded bytes of a single check that depend on its rule alone (and
/// the store's prefix), kept for the last rules seen: a service checks the
/// same few rules over and over, and formatting them was most of what
/// encoding a check cost. An entry is found by the rule's equality: the
/// same `Rule` (its shared address: the entry holds a clone, so the
/// address is never reused while cached) in one comparison, else equal
/// contents; so a hit is always right. Lives in the connection's state,
/// under the lock commands are encoded under.
#[derive(Default)]
pub(super) struct RuleCache {
    entries: Vec<RuleBytes>,
    next: usize,
}

struct RuleBytes {
    /// The rule (a clone: its address cannot be reused while cached, and
    /// `Rule`'s equality compares the addresses first, then the contents).
    rule: Rule,
    /// `{prefix}:{<rule>:`
    key_head: Vec<u8>,
    /// `}:<algorithm>` and the `\r\n` ending the key's bulk string.
    key_tail: Vec<u8>,
    /// The algorithm's code, encoded.
    code: Vec<u8>,
    /// [`push_rule_args`], encoded.
    rule_args: Vec<u8>,
    /// All six pair arguments of a check of cost 1 (the usual one), encoded.
    pair_cost_one: Vec<u8>,
}

impl RuleBytes {
    fn new(prefix: &str, rule: &Rule) -> Self {
        let mut key_head = Vec::new();
        keys::write_key_head(&mut key_head, prefix, rule.name());
        let mut key_tail = Vec::new();
        keys::write_key_tail(&mut key_tail, rule.algorithm());
        key_tail.extend_from_slice(b"\r\n");
        let mut code = Vec::new();
        Encoder::append(&mut code).uint(u64::from(scripts::code(rule.algorithm())));
        let mut rule_args = Vec::new();
        push_rule_args(&mut Encoder::append(&mut rule_args), rule);
        let mut pair_cost_one = Vec::new();
        push_pair_args(&mut Encoder::append(&mut pair_cost_one), rule, 1);
        Self {
            rule: rule.clone(),
            key_head,
            key_tail,
            code,
            rule_args,
            pair_cost_one,
        }
    }

    fn is(&self, rule: &Rule) -> bool {
        self.rule == *rule
    }
}

impl RuleCache {
    fn get(&mut self, prefix: &str, rule: &Rule) -> &RuleBytes {
        let i = match self.entries.iter().position(|e| e.is(rule)) {
            Some(i) => i,
            None if self.entries.len() < RULE_CACHE => {
                self.entries.push(RuleBytes::new(prefix, rule));
                self.entries.len() - 1
            }
            None => {
                let i = self.next;
                self.next = (i + 1) % RULE_CACHE;
                self.entries[i] = RuleBytes::new(prefix, rule);
                i
            }
        };
        &self.entries[i]
    }
}

/// One run of a script: its pairs, mode (`c`onsume, `d`ry run, `r`efund,
/// ... see `prelude.lua`), explicit time, if any, and what the mode adds.
#[derive(Clone, Copy)]
pub(super) struct Run<'a, 'r> {
    pub(super) pairs: Pairs<'a, 'r>,
    pub(super) mode: &'a str,
    pub(super) at: Option<Micros>,
    pub(super) extra: Extra<'a>,
}

impl Run<'_, '_> {
    /// The number of keys the run names.
    pub(super) fn keys(&self) -> usize {
        let (records, resets) = self.extra.records();
        self.pairs.len() + records.len() + resets.len()
    }

    /// The number of arguments after `EVALSHA sha nkeys`.
    pub(super) fn args(&self) -> usize {
        self.keys() + 4 + 6 * self.pairs.len() + self.extra.argv()
    }
}

/// What a run adds to its pairs' keys and arguments.
#[derive(Clone, Copy)]
pub(super) enum Extra<'a> {
    /// Nothing: a check, a charge, a refund.
    None,
    /// A reservation (mode `v`): each pair's record key; then, after the
    /// pairs' arguments, the ttl and how long the record is remembered
    /// after it (µs), the record's PX, and each pair's [`admitted_rule`].
    Reserve {
        records: &'a [Vec<u8>],
        ttl: Micros,
        remember: Micros,
        admitted: &'a [Vec<u8>],
    },
    /// A settle (mode `s`): each pair's record key, then each pair's
    /// [`keys::reset_mark`]; then one actual usage per pair (`-1`:
    /// cancelled).
    Settle {
        records: &'a [Vec<u8>],
        resets: &'a [Vec<u8>],
        actual: &'a [Option<u64>],
    },
    /// An acquire, release or renew (modes `a`, `l`, `w`): the lease's id
    /// after the pairs' arguments.
    Lease { id: &'a str },
}

impl Extra<'_> {
    /// The keys after the pairs': records, then a settle's reset marks.
    fn records(&self) -> (&[Vec<u8>], &[Vec<u8>]) {
        match self {
            Extra::None | Extra::Lease { .. } => (&[], &[]),
            Extra::Reserve { records, .. } => (records, &[]),
            Extra::Settle {
                records, resets, ..
            } => (records, resets),
        }
    }

    fn argv(&self) -> usize {
        match self {
            Extra::None => 0,
            Extra::Reserve { admitted, .. } => 3 + admitted.len(),
            Extra::Lease { .. } => 1,
            Extra::Settle { actual, .. } => actual.len(),
        }
    }

    fn push(&self, a: &mut impl Args) {
        let (records, resets) = self.records();
        for r in records.iter().chain(resets) {
            a.bytes(r);
        }
    }

    /// `margin_ms`: what the script adds to every TTL (0 at the server's
    /// time).
    fn push_argv(&self, a: &mut impl Args, margin_ms: u64) {
        match self {
            Extra::None => {}
            Extra::Reserve {
                ttl,
                remember,
                admitted,
                ..
            } => {
                // In hex, as the record keeps them: the script copies them
                // into it and its settle reads them back with strtoul, far
                // cheaper in Redis's Lua than decimal's strtod and
                // string.format (docs/redis-store.md, "Reservations").
                a.bytes(format!("{ttl:x}").as_bytes());
                a.bytes(format!("{remember:x}").as_bytes());
                // The record's PX, as the script's ttl_ms would make it.
                let ms = (ttl + remember).div_ceil(1000) + margin_ms;
                a.uint(ms.max(1));
                for r in *admitted {
                    a.bytes(r);
                }
            }
            Extra::Lease { id } => a.bytes(id.as_bytes()),
            Extra::Settle { actual, .. } => {
                for x in *actual {
                    match x {
                        Some(v) => a.uint(*v),
                        None => a.bytes(b"-1"),
                    }
                }
            }
        }
    }
}

/// The arguments after `EVALSHA sha nkeys` or `EVAL source nkeys`:
/// `keys… t margin n mode` and six per pair (see `check.lua`), with keys
/// under `prefix` and `margin_ms` added to TTLs at explicit times.
pub(super) fn script_args(a: &mut impl Args, prefix: &str, margin_ms: u64, run: Run<'_, '_>) {
    let Run {
        pairs,
        mode,
        at,
        extra,
    } = run;
    let n = pairs.len();
    for i in 0..n {
        pairs.key(i, prefix, a);
    }
    extra.push(a);
    push_common_args(a, n, margin_ms, mode, at);
    for i in 0..n {
        let (rule, cost) = pairs.rule_cost(i);
        if mode == CHARGE || mode == REFUND || mode == SETTLE {
            push_charge_args(a, rule, cost);
        } else {
            push_pair_args(a, rule, cost);
        }
    }
    extra.push_argv(a, if at.is_some() { margin_ms } else { 0 });
}

/// The mode of a reservation (see `prelude.lua`).
pub(super) const RESERVE: &str = "v";
/// The mode of a settle or cancel (see `prelude.lua`).
pub(super) const SETTLE: &str = "s";
/// The modes of an acquire, a release and a renew (see `prelude.lua`).
pub(super) const ACQUIRE: &str = "a";
pub(super) const RELEASE: &str = "l";
pub(super) const RENEW: &str = "w";

/// The mode of a charge run (see `prelude.lua`).
pub(super) const CHARGE: &str = "g";
/// Mode `f`: every pair given its cost back now (docs/semantics.md,
/// "Refund"); the reply as mode `g`'s.
pub(super) const REFUND: &str = "f";

/// The six script arguments of a charge (`prelude.lua`, CHARGE
/// ARGUMENTS): the cost as it is, and the debt cap in place of what only a
/// check needs.
fn push_charge_args(a: &mut impl Args, rule: &Rule, cost: u64) {
    a.uint(u64::from(scripts::code(rule.algorithm())));
    a.uint(cost);
    for p in charge_rule_args(rule) {
        a.uint(p);
    }
}

/// A charge's four arguments that depend on the rule alone.
fn charge_rule_args(rule: &Rule) -> [u64; 4] {
    if has_increment(rule.algorithm()) {
        [
            rule.max_debt(),
            rule.tau_micros(),
            rule.interval_micros(),
            rule.burst(),
        ]
    } else {
        [rule.period_micros(), rule.limit(), rule.max_debt(), 0]
    }
}

/// What a reservation's record keeps of the rule that admitted a pair (a
/// per-key override's, a per-call limit's): `:<code>` then a charge's four
/// rule arguments and the rule's capacity, in hex. A settle counts under
/// them, not under the rule the pair's name finds by then
/// (docs/redis-store.md, "Reservations").
pub(super) fn admitted_rule(rule: &Rule) -> Vec<u8> {
    let mut out = format!(":{:x}", scripts::code(rule.algorithm()));
    for p in charge_rule_args(rule) {
        out.push_str(&format!(":{p:x}"));
    }
    out.push_str(&format!(":{:x}", rule.capacity()));
    out.into_bytes()
}

/// Appends `run` of `script` (as a function, by hash or by source: `via`)
/// as one RESP command; a single check's rule-dependent bytes come from
/// (and go to) `cache`.
pub(super) fn encode_run(
    out: &mut Vec<u8>,
    cache: &mut RuleCache,
    script: &Script,
    via: Via,
    prefix: &str,
    margin_ms: u64,
    run: Run<'_, '_>,
) {
    // A single check's rule-dependent bytes are cached; a charge's
    // arguments differ, so it takes the general path.
    let single = match run.pairs {
        Pairs::One { rule, key, cost } if ![CHARGE, REFUND, SETTLE].contains(&run.mode) => {
            Some((rule, key, cost))
        }
        _ => None,
    };
    let Some((rule, key, cost)) = single else {
        let mut e = Encoder::command(out, 3 + run.args());
        e.encoded(script.head(via));
        e.uint(run.keys() as u64);
        script_args(&mut e, prefix, margin_ms, run);
        return;
    };
    let cached = cache.get(prefix, rule);
    Encoder::append(out).encoded(script.head_one_key(via));
    encode_key(out, cached, key);
    push_common_args(&mut Encoder::append(out), 1, margin_ms, run.mode, run.at);
    encode_pair(out, cached, rule, cost);
}

/// Appends the Redis key of (`cached`'s rule, `key`) as a RESP bulk string.
fn encode_key(out: &mut Vec<u8>, cached: &RuleBytes, key: &[u8]) {
    let mut e = Encoder::append(out);
    // A bulk string (its \r\n ends `key_tail`).
    e.bulk_header(cached.key_head.len() + keys::key_body_len(key) + cached.key_tail.len() - 2);
    e.encoded(&cached.key_head);
    e.with_buffer(|out| keys::write_key_body(out, key));
    e.encoded(&cached.key_tail);
}

/// Appends the six pair arguments of a check of `rule` (`cached`'s).
fn encode_pair(out: &mut Vec<u8>, cached: &RuleBytes, rule: &Rule, cost: u64) {
    let mut e = Encoder::append(out);
    if cost == 1 {
        e.encoded(&cached.pair_cost_one);
        return;
    }
    e.encoded(&cached.code);
    let cost = clamp_cost(rule, cost);
    e.uint(cost);
    if has_increment(rule.algorithm()) {
        e.uint(rule.increment_micros(cost));
    }
    e.encoded(&cached.rule_args);
}

/// Appends a single check's parts for [`Conn::check`]: its key, then its
/// pair arguments. Returns the key's length.
#[inline] // called per check from check.rs, another codegen unit
pub(super) fn encode_check(
    out: &mut Vec<u8>,
    cache: &mut RuleCache,
    prefix: &str,
    rule: &Rule,
    key: &[u8],
    cost: u64,
) -> usize {
    let cached = cache.get(prefix, rule);
    let start = out.len();
    encode_key(out, cached, key);
    let key_len = out.len() - start;
    encode_pair(out, cached, rule, cost);
    key_len
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rule::RuleSpec;
    use crate::store::redis::scripts::Scripts;

    /// The start of `script`'s command run `via`, as redis-rs sends it.
    fn named(script: &Script, via: Via) -> redis::Cmd {
        let (verb, body) = match via {
            Via::Function => ("FCALL", scripts::LIBRARY.name.as_str()),
            Via::Sha => ("EVALSHA", script.sha.as_str()),
            Via::Source => ("EVAL", script.source),
        };
        let mut cmd = redis::cmd(verb);
        cmd.arg(body);
        cmd
    }

    /// The lean connection's commands are byte for byte what redis-rs
    /// sends for the same run.
    #[test]
    fn runs_are_encoded_as_redis_rs_encodes_them() {
        let scripts = Scripts::new();
        let rules: Vec<Rule> = Algorithm::RATES
            .iter()
            .map(|&a| {
                RuleSpec::new(format!("r_{a}"), a, 100_000, Duration::from_secs(1))
                    .build()
                    .expect("valid rule")
            })
            .collect();
        // Same name, other parameters: never mistaken for the first.
        let renamed = |r: &Rule| RuleSpec::new(r.name(), r.algorithm(), 7, Duration::from_secs(3));
        let rules: Vec<Rule> = rules
            .iter()
            .flat_map(|r| [r.clone(), renamed(r).build().expect("valid rule")])
            .collect();
        let long = vec![b'x'; 300];
        let pairs: Vec<Pair<'_>> = rules
            .iter()
            .zip([&b"alice"[..], b"", &long, b"k", b"\r\n"])
            .map(|(rule, key)| Pair {
                rule,
                key: keys::redis_key("tg", rule.name(), rule.algorithm(), key),
                cost: 3,
            })
            .collect();
        let mut runs = vec![Pairs::Many(&pairs), Pairs::Many(&pairs[..1])];
        let mut cache = RuleCache::default();
        let keys = [&b"alice"[..], b"", &long, b"k", b"\r\n"];
        for (rule, key) in rules.iter().zip(keys.iter().cycle()) {
            for cost in [0, 1, 12_345, u64::MAX] {
                runs.push(Pairs::One { rule, key, cost });
            }
        }
        let records: Vec<Vec<u8>> = (0..pairs.len())
            .map(|i| format!("rec{i}").into_bytes())
            .collect();
        let admitted: Vec<Vec<u8>> = pairs.iter().map(|p| admitted_rule(p.rule)).collect();
        let actual: Vec<Option<u64>> = (0..pairs.len() as u64)
            .map(|i| (i % 2 == 0).then_some(u64::MAX / 7 * i))
            .collect();
        // Twice: the second time every rule is cached.
        for pairs in runs.iter().chain(&runs).copied() {
            let n = pairs.len();
            let mut extras = vec![
                ("c", Extra::None),
                ("d", Extra::None),
                ("r", Extra::None),
                ("g", Extra::None),
            ];
            if matches!(pairs, Pairs::Many(_)) {
                extras.push((
                    "v",
                    Extra::Reserve {
                        records: &records[..n],
                        ttl: 60_000_000,
                        remember: 3_600_000_000,
                        admitted: &admitted[..n],
                    },
                ));
                extras.push((
                    "s",
                    Extra::Settle {
                        records: &records[..n],
                        resets: &records[..n],
                        actual: &actual[..n],
                    },
                ));
            }
            for at in [None, Some(1_764_000_000_000_000)] {
                for &(mode, extra) in &extras {
                    for via in [Via::Function, Via::Sha, Via::Source] {
                        let script = &scripts.multi;
                        let run = Run {
                            pairs,
                            mode,
                            at,
                            extra,
                        };
                        let mut lean = Vec::new();
                        encode_run(&mut lean, &mut cache, script, via, "tg", 600_000, run);
                        let mut cmd = named(script, via);
                        cmd.arg(run.keys());
                        script_args(&mut cmd, "tg", 600_000, run);
                        assert_eq!(
                            String::from_utf8_lossy(&lean),
                            String::from_utf8_lossy(&cmd.get_packed_command()),
                        );
                    }
                }
            }
        }
    }

    /// A run of single checks, as the connection writes it (alone, or
    /// batched), is byte for byte what redis-rs sends for that run.
    #[test]
    fn batched_checks_are_encoded_as_redis_rs_encodes_them() {
        let scripts = Scripts::new();
        let rules: Vec<Rule> = Algorithm::RATES
            .iter()
            .map(|&a| {
                RuleSpec::new(format!("b_{a}"), a, 1_000, Duration::from_secs(60))
                    .build()
                    .expect("valid rule")
            })
            .collect();
        let long = vec![b'y'; 200];
        let keys = [&b"alice"[..], b"", &long, b"k", b"\r\n"];
        let checks: Vec<(&Rule, &[u8], u64)> = (0..70)
            .map(|i| (&rules[i % 7 % 5], keys[i % 5], [0, 1, 5, u64::MAX][i % 4]))
            .collect();
        let same: Vec<(&Rule, &[u8], u64)> = checks
            .iter()
            .map(|&(_, key, cost)| (&rules[3], key, cost))
            .collect();
        let mut cache = RuleCache::default();
        for run in [
            &checks[..1],
            &checks[..2],
            &checks[..],
            &same[..1],
            &same[..],
        ] {
            for at in [None, Some(1_764_000_000_000_000)] {
                for via in [Via::Function, Via::Sha, Via::Source] {
                    let (mut parts, mut key_lens) = (Vec::new(), Vec::new());
                    for &(rule, key, cost) in run {
                        let mut part = Vec::new();
                        key_lens.push(encode_check(&mut part, &mut cache, "tg", rule, key, cost));
                        parts.push(part);
                    }
                    let code = run[0].0.algorithm();
                    let all_same = run.iter().all(|c| c.0.algorithm() == code);
                    let mut lean = Vec::new();
                    scripts.write_checks(
                        &mut lean,
                        all_same.then(|| scripts::code(code)),
                        via,
                        at.map(|t| (t, 600_000)),
                        parts.iter().zip(&key_lens).map(|(p, &k)| &p[..k]),
                        parts.iter().zip(&key_lens).map(|(p, &k)| &p[k..]),
                    );
                    let script = if all_same {
                        scripts.single(code)
                    } else {
                        &scripts.multi
                    };
                    let mut cmd = named(script, via);
                    let run_keys: Vec<Vec<u8>> = run
                        .iter()
                        .map(|&(rule, key, _)| {
                            keys::redis_key("tg", rule.name(), rule.algorithm(), key)
                        })
                        .collect();
                    // A batch names each key once (in order of first use),
                    // with one byte per check naming its key when some
                    // repeat.
                    let mut distinct: Vec<&Vec<u8>> = Vec::new();
                    let mut key_refs = Vec::new();
                    for k in &run_keys {
                        let i = distinct.iter().position(|&d| d == k).unwrap_or_else(|| {
                            distinct.push(k);
                            distinct.len() - 1
                        });
                        key_refs.push(u8::try_from(i + 1).expect("few keys"));
                    }
                    if distinct.len() == run.len() {
                        key_refs.clear();
                    }
                    if run.len() == 1 {
                        cmd.arg(1).arg(&run_keys[0]);
                        push_common_args(&mut cmd, 1, 600_000, "c", at);
                        push_pair_args(&mut cmd, run[0].0, run[0].2);
                    } else {
                        cmd.arg(distinct.len());
                        for k in &distinct {
                            cmd.arg(k.as_slice());
                        }
                        // Each distinct (rule, cost) once, in order of first
                        // use; one byte per check names its tuple (none
                        // when there is one tuple).
                        push_common_args(&mut cmd, run.len(), 600_000, "b", at);
                        let mut tuples: Vec<(&Rule, u64)> = Vec::new();
                        let mut refs = Vec::new();
                        for &(rule, _, cost) in run {
                            let cost = clamp_cost(rule, cost);
                            let i = tuples
                                .iter()
                                .position(|&(r, c)| r == rule && c == cost)
                                .unwrap_or_else(|| {
                                    tuples.push((rule, cost));
                                    tuples.len() - 1
                                });
                            refs.push(u8::try_from(i + 1).expect("few tuples"));
                        }
                        if tuples.len() == 1 {
                            refs.clear();
                        }
                        cmd.arg(refs);
                        cmd.arg(key_refs);
                        for (rule, cost) in tuples {
                            push_pair_args(&mut cmd, rule, cost);
                        }
                    }
                    assert_eq!(
                        String::from_utf8_lossy(&lean),
                        String::from_utf8_lossy(&cmd.get_packed_command()),
                    );
                }
            }
        }
    }
}
