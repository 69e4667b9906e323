//! A raw HTTP/1.1 upstream for the usage tests: every byte of its answers
//! is written by hand, so a test controls where the usage is (head,
//! trailers, nowhere, garbage) and how long a body streams. One thread per
//! connection; every answer ends its connection (`Connection: close`).
//!
//! * `/usage/N`: `x-usage-tokens: N` in the head, body `hello`.
//! * `/none`: no usage field.
//! * `/garbage`: `x-usage-tokens: lots`.
//! * `/trailer/N`: chunked, the usage in the trailers only.
//! * `/stream/MS`: chunked, `tok` every 50 ms for MS ms, no usage.
//! * `/silent/MS`: answers `/none`'s answer only after MS ms.
//! * `/forever`: chunked, `tok` every 50 ms until the proxy stops reading
//!   (at most 30 s), no usage.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The upstream's address; its threads end with the test process.
pub struct UsageUpstream {
    pub addr: SocketAddr,
}

/// Starts the upstream on a free loopback port.
pub fn start_usage_upstream() -> UsageUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || serve(stream));
        }
    });
    UsageUpstream { addr }
}

fn serve(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    let path = first.split(' ').nth(1).unwrap_or("/").to_owned();
    let _ = answer(stream, &path);
}

fn answer(mut s: TcpStream, path: &str) -> std::io::Result<()> {
    let plain = |usage: Option<&str>| {
        let field = usage.map_or(String::new(), |u| format!("x-usage-tokens: {u}\r\n"));
        format!("HTTP/1.1 200 OK\r\n{field}Content-Length: 5\r\nConnection: close\r\n\r\nhello")
    };
    const CHUNKED: &str = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n";
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["usage", n] => s.write_all(plain(Some(n)).as_bytes()),
        ["none"] => s.write_all(plain(None).as_bytes()),
        ["silent", ms] => {
            std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0)));
            s.write_all(plain(None).as_bytes())
        }
        ["garbage"] => s.write_all(plain(Some("lots")).as_bytes()),
        ["trailer", n] => s.write_all(
            format!(
                "{CHUNKED}Trailer: x-usage-tokens\r\n\r\n5\r\nhello\r\n0\r\nx-usage-tokens: {n}\r\n\r\n"
            )
            .as_bytes(),
        ),
        ["stream", ms] => {
            let end = Instant::now() + Duration::from_millis(ms.parse().unwrap_or(0));
            s.write_all(format!("{CHUNKED}\r\n").as_bytes())?;
            while Instant::now() < end {
                s.write_all(b"3\r\ntok\r\n")?;
                s.flush()?;
                std::thread::sleep(Duration::from_millis(50));
            }
            s.write_all(b"0\r\n\r\n")
        }
        ["forever"] => {
            s.write_all(format!("{CHUNKED}\r\n").as_bytes())?;
            let end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < end {
                s.write_all(b"3\r\ntok\r\n")?;
                s.flush()?;
                std::thread::sleep(Duration::from_millis(50));
            }
            s.write_all(b"0\r\n\r\n")
        }
        _ => s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    }
}
