//! Reservation and lease ids as clients send them back: never a panic,
//! and an id read is written back as the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::ticket::{Ticket, TicketKind};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for kind in [TicketKind::Reservation, TicketKind::Lease] {
        if let Ok(ticket) = Ticket::parse(text, kind) {
            assert_eq!(
                ticket.to_string(),
                text,
                "an id read is not written back the same"
            );
            assert_eq!(Ticket::parse(&ticket.to_string(), kind), Ok(ticket));
        }
    }
});
