//! A raw HTTP/1.1 upstream for the request-body tests: it reads each
//! request body as it came over the wire (by `Content-Length`, or chunk
//! by chunk) and answers with what it got, so a test sees the exact bytes
//! and framing the proxy forwarded. One thread per connection; every
//! answer ends its connection.
//!
//! The answer: `200 ok` with `x-body-len`, `x-body-hash` (FNV-1a 64 of
//! the body, [`fnv`]), `x-framing` (`length` or `chunked`), and the usage
//! fields the query asks for: `in=N` → `x-input: N`, `out=N` →
//! `x-output: N`, `total=N` → `x-usage-tokens: N`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The upstream's address, and the body bytes it has received so far
/// (over every request).
pub struct BodyUpstream {
    pub addr: SocketAddr,
    pub received: Arc<AtomicU64>,
}

/// FNV-1a, 64 bits: a hash whose value does not depend on how the bytes
/// were split.
pub fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Starts the upstream on a free loopback port.
pub fn start_body_upstream() -> BodyUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let received = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                let _ = serve(stream, &counter);
            });
        }
    });
    BodyUpstream { addr, received }
}

/// Reads into `hash` exactly `n` bytes.
fn take(r: &mut impl Read, mut n: u64, hash: &mut u64, counter: &AtomicU64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    while n > 0 {
        let want = usize::try_from(n.min(buf.len() as u64)).expect("small");
        let got = r.read(&mut buf[..want])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        *hash = fnv(*hash, &buf[..got]);
        counter.fetch_add(got as u64, Ordering::SeqCst);
        n -= got as u64;
    }
    Ok(())
}

fn serve(stream: TcpStream, counter: &AtomicU64) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let (mut length, mut chunked) = (0u64, false);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut hash = FNV_START;
    let mut len = 0u64;
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = size.trim().split(';').next().unwrap_or("");
            let n = u64::from_str_radix(size, 16).unwrap_or(0);
            if n == 0 {
                // Trailers, to the empty line.
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                        break;
                    }
                }
                break;
            }
            take(&mut reader, n, &mut hash, counter)?;
            len += n;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    } else {
        take(&mut reader, length, &mut hash, counter)?;
        len = length;
    }
    let query = first
        .split(' ')
        .nth(1)
        .and_then(|t| t.split_once('?'))
        .map_or("", |(_, q)| q);
    let mut usage = String::new();
    for (name, field) in [
        ("in", "x-input"),
        ("out", "x-output"),
        ("total", "x-usage-tokens"),
    ] {
        if let Some(v) = query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        {
            usage.push_str(&format!("{field}: {v}\r\n"));
        }
    }
    let framing = if chunked { "chunked" } else { "length" };
    let mut s = stream;
    s.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nx-body-len: {len}\r\nx-body-hash: {hash:016x}\r\n\
             x-framing: {framing}\r\n{usage}Content-Length: 2\r\nConnection: close\r\n\r\nok"
        )
        .as_bytes(),
    )
}
