use proptest::prelude::*;

use super::*;

/// What a parser made of a stream: each dispatched event's data, and
/// markers for a skipped and a cut event.
fn events(chunks: &[&[u8]]) -> Vec<String> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    let mut open = Vec::new();
    let mut take = |piece: Piece<'_>| match piece {
        Piece::Data(d) => open.extend_from_slice(d),
        Piece::Dispatch => {
            out.push(String::from_utf8_lossy(&std::mem::take(&mut open)).into_owned());
        }
        Piece::Skipped => {
            open.clear();
            out.push("<skipped>".to_owned());
        }
        Piece::Cut => {
            open.clear();
            out.push("<cut>".to_owned());
        }
    };
    for c in chunks {
        parser.push(c, &mut take);
    }
    parser.finish(&mut take);
    out
}

#[test]
fn events_end_at_a_blank_line_with_any_line_ending() {
    for stream in [
        &b"data: a\n\ndata: b\n\n"[..],
        b"data: a\r\n\r\ndata: b\r\n\r\n",
        b"data: a\r\rdata: b\r\r",
        b"data: a\r\n\ndata: b\n\r\n",
    ] {
        assert_eq!(
            events(&[stream]),
            ["a", "b"],
            "{:?}",
            String::from_utf8_lossy(stream)
        );
    }
}

#[test]
fn data_lines_join_with_lf_and_other_fields_are_ignored() {
    let stream =
        b": a comment\nevent: message_start\nid: 7\nretry: 10\ndata: {\"a\":\ndata:1}\ndata\n\n";
    assert_eq!(events(&[stream]), ["{\"a\":\n1}\n"]);
    // Only one space after the colon is dropped; `datum` is not `data`.
    assert_eq!(events(&[b"data:  x\ndatum: y\ndat: z\n\n"]), [" x"]);
    // An event with no data is no event.
    assert_eq!(
        events(&[b"event: ping\n\n: keep-alive\n\n"]),
        Vec::<String>::new()
    );
    // A byte-order mark at the start is skipped, split or not.
    assert_eq!(events(&[b"\xEF\xBB\xBFdata: a\n\n"]), ["a"]);
    assert_eq!(events(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]), ["a"]);
    // Not a mark: the bytes are the stream's (a field that is not data).
    assert_eq!(events(&[b"\xEF", b"data: a\n\ndata: b\n\n"]), ["b"]);
}

#[test]
fn a_stream_cut_inside_an_event_drops_it() {
    assert_eq!(events(&[b"data: a\n\ndata: {\"us"]), ["a", "<cut>"]);
    assert_eq!(events(&[b"data: a\n\ndata: b\n"]), ["a", "<cut>"]);
    assert_eq!(events(&[b"data: a\n\ndata"]), ["a", "<cut>"]);
    // Ending between events cuts nothing.
    assert_eq!(events(&[b"data: a\n\n: bye"]), ["a"]);
}

#[test]
fn an_event_over_the_bound_is_skipped_and_the_next_one_read() {
    let big = vec![b'x'; MAX_EVENT];
    let mut stream = b"data: ".to_vec();
    stream.extend_from_slice(&big);
    stream.extend_from_slice(b"\ndata: y\n\ndata: small\n\n");
    assert_eq!(events(&[&stream]), ["<skipped>", "small"]);
    // Exactly at the bound: kept.
    let mut stream = b"data: ".to_vec();
    stream.extend_from_slice(&big);
    stream.extend_from_slice(b"\n\n");
    assert_eq!(events(&[&stream]).len(), 1);
    assert_eq!(events(&[&stream])[0].len(), MAX_EVENT);
}

#[test]
fn the_parser_holds_no_buffer() {
    // Its whole state is inline: a 10 MB event costs it nothing.
    assert!(std::mem::size_of::<SseParser>() <= 64);
}

proptest! {
    /// Split anywhere, in any number of pieces, a stream parses the same.
    #[test]
    fn splits_change_nothing(cuts in proptest::collection::vec(0usize..200, 0..8)) {
        let stream: &[u8] = b"\xEF\xBB\xBF: hi\r\nevent: a\r\ndata: {\"usage\":\r\ndata: 12}\r\n\r\ndata:x\rdata\r\r\ndata: [DONE]\n\ndata: tail";
        let whole = events(&[stream]);
        let mut at: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for a in at {
            chunks.push(&stream[last..a]);
            last = a;
        }
        chunks.push(&stream[last..]);
        prop_assert_eq!(events(&chunks), whole);
    }
}
