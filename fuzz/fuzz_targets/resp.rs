//! The RESP2 reply parser: never a panic, a reply's length within the
//! buffer, a reply cut short always "incomplete" (replies arrive in
//! pieces), and the batch fast path agreeing with the general parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::store::redis::resp_fuzzing::{int_array_of, parse};

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    if let Ok(Some((ints, used))) = &parsed {
        let used = *used;
        assert!(
            used > 0 && used <= data.len(),
            "used {used} of {}",
            data.len()
        );
        assert_eq!(
            parse(&data[..used]),
            parsed,
            "the reply alone parses otherwise"
        );
        for cut in 0..used.min(512) {
            assert_eq!(parse(&data[..cut]), Ok(None), "cut at {cut} of {used}");
        }
        if let Some(ints) = ints {
            let mut fast = Vec::new();
            if let Some(fast_used) = int_array_of(data, ints.len(), &mut fast) {
                assert_eq!(
                    (&fast, fast_used),
                    (ints, used),
                    "the batch fast path disagrees"
                );
            }
        }
    }
    // The fast path reads nothing the general parser does not.
    for len in 0..8 {
        let mut fast = Vec::new();
        if let Some(used) = int_array_of(data, len, &mut fast) {
            assert_eq!(parsed, Ok(Some((Some(fast), used))), "fast path read {len}");
        }
    }
});
