//! The Lua scripts, composed from one file per algorithm, and the function
//! library holding all of them.
//!
//! Each script is `prelude.lua` + the algorithm file(s) + `check.lua`,
//! whose `main` is one run: one script per algorithm for single-rule
//! checks, and one holding all six for multi-rule checks. The same files
//! also make ONE function library (Redis 7 functions): its definitions run
//! once, when it is loaded, where a script re-runs them on every call.
//!
//! On the lean connection a run is an `FCALL` of the library's function;
//! on `Function not found` (a restart, a failover, `FUNCTION FLUSH`) the
//! connection loads the library and calls again; where Redis has no
//! functions (before 7) or refuses them, `EVALSHA` of the script; on
//! `NOSCRIPT`, `EVAL`, which also caches the script again. Cluster
//! (redis-rs) runs scripts. See docs/redis-store.md, "Functions".
//!
//! Concurrent single checks share one run in batch mode (see `conn/` and
//! [`Scripts::write_checks`]).

use std::sync::LazyLock;

use super::resp::{Args, Encoder, command};
use crate::rule::{Algorithm, Rule};
use crate::time::Micros;

/// A script for `EVAL`: the files, then a call of `main` on the script's
/// keys and arguments.
macro_rules! script {
    ($($file:literal),*) => {
        concat!(
            "local EVAL = true\n",
            include_str!("scripts/prelude.lua"),
            $(include_str!(concat!("scripts/", $file)),)*
            include_str!("scripts/check.lua"),
            "return main(KEYS, ARGV)\n"
        )
    };
}

/// How a run names what it runs: the library's function (`FCALL`), the
/// script's hash (`EVALSHA`) or its source (`EVAL`). Ordered from the
/// fallback up: a batch of checks goes the lowest way any of them asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Via {
    /// `EVAL source`: the server lost the script.
    Source,
    /// `EVALSHA sha`.
    Sha,
    /// `FCALL function`.
    Function,
}

/// The function library: every algorithm and `check.lua`, its `main`
/// registered under the library's own name, which carries a hash of the
/// files (so two versions of tollgate on one Redis each keep theirs).
pub(crate) struct Library {
    /// The library's name, also its function's.
    pub(crate) name: String,
    /// `FUNCTION LOAD source`, RESP-encoded.
    pub(crate) load: Vec<u8>,
    /// `FCALL name`, RESP-encoded.
    fcall: Vec<u8>,
}

/// The library every connection loads.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let body = concat!(
        include_str!("scripts/prelude.lua"),
        include_str!("scripts/gcra.lua"),
        include_str!("scripts/token_bucket.lua"),
        include_str!("scripts/fixed_window.lua"),
        include_str!("scripts/sliding_window.lua"),
        include_str!("scripts/sliding_log.lua"),
        include_str!("scripts/concurrency.lua"),
        include_str!("scripts/check.lua"),
    );
    let sha = sha1_smol::Sha1::from(body).digest().to_string();
    let name = format!("tollgate_{}", &sha[..16]);
    let source = format!(
        "#!lua name={name}\nlocal EVAL = false\n{body}redis.register_function('{name}', main)\n"
    );
    let mut load = Vec::new();
    command(&mut load, &[b"FUNCTION", b"LOAD", source.as_bytes()]);
    Library {
        fcall: bulk_pair("FCALL", &name),
        load,
        name,
    }
});

/// `$len verb $len body`, RESP-encoded: a command's first two arguments.
fn bulk_pair(verb: &str, body: &str) -> Vec<u8> {
    format!("${}\r\n{verb}\r\n${}\r\n{body}\r\n", verb.len(), body.len()).into_bytes()
}

/// One script's source and its SHA-1.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub(crate) source: &'static str,
    pub(crate) sha: String,
    /// `EVALSHA sha`, RESP-encoded once (every check starts with it).
    by_sha: Vec<u8>,
    /// `EVAL source`, RESP-encoded once.
    by_source: Vec<u8>,
    /// The start of a one-key run: `*14`, `EVALSHA sha 1`.
    one_by_sha: Vec<u8>,
    /// The start of a one-key run: `*14`, `EVAL source 1`.
    one_by_source: Vec<u8>,
    /// The start of a one-key run: `*14`, `FCALL function 1`.
    one_by_function: Vec<u8>,
}

impl Script {
    fn new(source: &'static str) -> Self {
        let sha = sha1_smol::Sha1::from(source).digest().to_string();
        let by_sha = bulk_pair("EVALSHA", &sha);
        let by_source = bulk_pair("EVAL", source);
        // 14 arguments: the verb, the script, 1 key, the key, 4 common
        // arguments and 6 for the pair (see check.lua).
        let one = |head: &[u8]| [b"*14\r\n", head, b"$1\r\n1\r\n"].concat();
        Self {
            source,
            one_by_sha: one(&by_sha),
            one_by_source: one(&by_source),
            one_by_function: one(&LIBRARY.fcall),
            by_sha,
            by_source,
            sha,
        }
    }

    /// The start of a run over one key, RESP-encoded: the command header,
    /// the verb and what it names (see [`Via`]), and `1`.
    pub(crate) fn head_one_key(&self, via: Via) -> &[u8] {
        match via {
            Via::Function => &self.one_by_function,
            Via::Sha => &self.one_by_sha,
            Via::Source => &self.one_by_source,
        }
    }

    /// The first two arguments of a run, RESP-encoded: `FCALL function`,
    /// `EVALSHA sha` or `EVAL source`.
    pub(crate) fn head(&self, via: Via) -> &[u8] {
        match via {
            Via::Function => &LIBRARY.fcall,
            Via::Sha => &self.by_sha,
            Via::Source => &self.by_source,
        }
    }
}

/// Every script the store runs.
#[derive(Debug, Clone)]
pub(crate) struct Scripts {
    single: [Script; 6],
    pub(crate) multi: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            single: [
                Script::new(script!("gcra.lua")),
                Script::new(script!("token_bucket.lua")),
                Script::new(script!("fixed_window.lua")),
                Script::new(script!("sliding_window.lua")),
                Script::new(script!("sliding_log.lua")),
                Script::new(script!("concurrency.lua")),
            ],
            multi: Script::new(script!(
                "gcra.lua",
                "token_bucket.lua",
                "fixed_window.lua",
                "sliding_window.lua",
                "sliding_log.lua",
                "concurrency.lua"
            )),
        }
    }

    /// The smallest script that holds every algorithm of `pairs`: the
    /// algorithm's own when they share one (a script run defines all the
    /// functions it holds, so the six-algorithm script costs redis-server
    /// several times as much per run), else the one holding all six.
    pub(crate) fn for_pairs<'r>(&self, mut rules: impl Iterator<Item = &'r Rule>) -> &Script {
        let Some(first) = rules.next().map(Rule::algorithm) else {
            return &self.multi;
        };
        if rules.all(|r| r.algorithm() == first) {
            self.single(first)
        } else {
            &self.multi
        }
    }

    /// The script for single checks of `algorithm`.
    pub(crate) fn single(&self, algorithm: Algorithm) -> &Script {
        &self.single[usize::from(code(algorithm)) - 1]
    }

    /// Appends ONE script run deciding single checks, independently and in
    /// order, at the server's time or with `at` (t, TTL margin) an explicit
    /// one: each check's Redis key (a RESP bulk string, from `keys`) and six
    /// pair arguments (RESP, from `args`).
    /// `code` is the algorithm all share (its own script runs them), or
    /// `None` when they mix (the script holding all six does). One check
    /// is written as the ordinary single check (`t margin 1 c`); several
    /// (at most 255) as a batch (each distinct key once, `t margin n b refs
    /// key_refs`, then each distinct six-argument tuple once: see
    /// `prelude.lua`), whose reply is the time
    /// and four integers per check, or a check's error text in place of its
    /// first.
    pub(crate) fn write_checks<'a>(
        &self,
        out: &mut Vec<u8>,
        code: Option<u8>,
        via: Via,
        at: Option<(Micros, u64)>,
        keys: impl ExactSizeIterator<Item = &'a [u8]>,
        args: impl Iterator<Item = &'a [u8]>,
    ) {
        let script = match code.and_then(|c| self.single.get(usize::from(c).wrapping_sub(1))) {
            Some(script) => script,
            None => &self.multi,
        };
        let n = keys.len();
        let (t, margin_ms) = at.unzip();
        if n == 1 {
            let mut e = Encoder::append(out);
            e.encoded(script.head_one_key(via));
            for key in keys {
                e.encoded(key);
            }
            push_common_args(&mut e, 1, margin_ms.unwrap_or(0), "c", t);
            for a in args {
                e.encoded(a);
            }
            return;
        }
        // Each check's tuple, as an index among the distinct ones: mostly
        // the previous check's, else found by a scan of the few so far.
        let mut tuples: Vec<&[u8]> = Vec::new();
        let mut refs = Vec::with_capacity(n);
        for a in args {
            let i = match refs.last() {
                Some(&r) if tuples[usize::from(r) - 1] == a => usize::from(r) - 1,
                _ => tuples.iter().position(|&t| t == a).unwrap_or_else(|| {
                    tuples.push(a);
                    tuples.len() - 1
                }),
            };
            refs.push(u8::try_from(i + 1).unwrap_or(u8::MAX));
        }
        let (distinct, key_refs) = distinct_keys(keys);
        let mut e = Encoder::command(out, 9 + distinct.len() + 6 * tuples.len());
        e.encoded(script.head(via));
        e.uint(distinct.len() as u64);
        for key in distinct {
            e.encoded(key);
        }
        push_common_args(&mut e, n, margin_ms.unwrap_or(0), "b", t);
        // One tuple (the usual batch: one rule, one cost): no indices.
        e.bytes(if tuples.len() == 1 { &[] } else { &refs });
        e.bytes(&key_refs);
        for a in tuples {
            e.encoded(a);
        }
    }
}

/// A batch's keys, each once, and each check's key as its (1-based) index
/// among them, one byte a check; no indices when no key repeats (see
/// `check.lua`, mode "b"). A hot key's batch sends its key once: Redis then
/// reads it, and makes a Lua string of it, once and not once a check.
/// Repeats are found by a hash of each key into a table of twice the
/// batch's size at most (n <= 255).
fn distinct_keys<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> (Vec<&'a [u8]>, Vec<u8>) {
    let n = keys.len();
    let mask = (2 * n).next_power_of_two() - 1;
    let mut table = [0u8; 512];
    let mut distinct: Vec<&[u8]> = Vec::with_capacity(n);
    let mut refs = Vec::with_capacity(n);
    for key in keys {
        let mut slot = word_hash(key) & mask;
        let i = loop {
            match table[slot] {
                0 => {
                    distinct.push(key);
                    // n <= 255 (see write_checks)
                    table[slot] = u8::try_from(distinct.len()).unwrap_or(u8::MAX);
                    break distinct.len();
                }
                r if distinct[usize::from(r) - 1] == key => break usize::from(r),
                _ => slot = (slot + 1) & mask,
            }
        };
        refs.push(u8::try_from(i).unwrap_or(u8::MAX));
    }
    if distinct.len() == n {
        refs.clear();
    }
    (distinct, refs)
}

/// A quick hash of a key's bytes, eight at a time (FxHash's step): enough
/// to spread a batch's keys over its table (`distinct_keys`).
fn word_hash(bytes: &[u8]) -> usize {
    const SEED: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        h = (h.rotate_left(5) ^ w).wrapping_mul(SEED);
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(last)).wrapping_mul(SEED);
    // the high bits are the well mixed ones
    (h >> 40) as usize
}

/// The algorithm's code in the scripts' calling convention.
pub(crate) fn code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::Gcra => 1,
        Algorithm::TokenBucket => 2,
        Algorithm::FixedWindow => 3,
        Algorithm::SlidingWindow => 4,
        Algorithm::SlidingLog => 5,
        Algorithm::Concurrency => 6,
    }
}

/// `t margin n mode` (see `check.lua`).
pub(super) fn push_common_args(
    a: &mut impl Args,
    n: usize,
    margin_ms: u64,
    mode: &str,
    at: Option<Micros>,
) {
    match at {
        // The common case, encoded once.
        None if n == 1 && mode == "c" => a.preencoded(NOW_ONE_CHECK.0, NOW_ONE_CHECK.1),
        None => {
            a.bytes(b"");
            a.uint(0);
            a.uint(n as u64);
            a.bytes(mode.as_bytes());
        }
        Some(t) => {
            a.uint(t);
            a.uint(margin_ms);
            a.uint(n as u64);
            a.bytes(mode.as_bytes());
        }
    }
}

/// `t margin n mode` of a single check at the server's time (`"" 0 1 c`),
/// and their RESP encoding.
const NOW_ONE_CHECK: (&[&[u8]], &[u8]) = (
    &[b"", b"0", b"1", b"c"],
    b"$0\r\n\r\n$1\r\n0\r\n$1\r\n1\r\n$1\r\nc\r\n",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preencoded_arguments_are_what_they_encode() {
        let mut plain = Vec::new();
        let mut e = Encoder::append(&mut plain);
        for arg in NOW_ONE_CHECK.0 {
            e.bytes(arg);
        }
        assert_eq!(plain, NOW_ONE_CHECK.1);
    }

    /// `distinct_keys` names each key once, in order of first use, and
    /// each check's key by its index, for batches of every size up to 255
    /// with few or many distinct keys (so with colliding slots): what a
    /// plain scan finds.
    #[test]
    fn a_batch_names_each_key_once() {
        let pool: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("$20\r\ntg:{{r:=key{i:08}}}:gcra\r\n").into_bytes())
            .collect();
        let mut seed = 7u64;
        for n in [2usize, 3, 30, 64, 65, 200, 255] {
            for spread in [1usize, 2, 5, 40, 300] {
                let keys: Vec<&[u8]> = (0..n)
                    .map(|_| {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        pool[(seed >> 33) as usize % spread].as_slice()
                    })
                    .collect();
                let (distinct, refs) = distinct_keys(keys.iter().copied());
                let mut want: Vec<&[u8]> = Vec::new();
                for k in &keys {
                    if !want.contains(k) {
                        want.push(k);
                    }
                }
                assert_eq!(distinct, want, "n {n}, spread {spread}");
                if want.len() == n {
                    assert!(refs.is_empty());
                } else {
                    let named: Vec<&[u8]> =
                        refs.iter().map(|&r| want[usize::from(r) - 1]).collect();
                    assert_eq!(named, keys, "n {n}, spread {spread}");
                }
            }
        }
    }
}
