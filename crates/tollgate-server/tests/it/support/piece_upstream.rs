//! A raw HTTP/1.1 upstream for the body-usage tests: it answers each path
//! with a body its test gave, typed and framed as the test says, written
//! in small pieces with a flush between them (so a proxy sees them as
//! separate frames), cut short or stalled when the test says, and echoes the request's `Accept-Encoding` back in
//! `x-seen-accept-encoding`. One thread per connection; every answer
//! ends its connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// One answer: its `Content-Type`, extra head fields, its body, the size
/// of the pieces it is written in, and whether the body is cut short
/// (chunked, the connection closed before the last chunk).
#[derive(Clone)]
pub struct Answer {
    pub content_type: &'static str,
    pub fields: Vec<(&'static str, &'static str)>,
    pub body: Vec<u8>,
    pub piece: usize,
    pub cut: bool,
    /// After the body, send nothing more for 30 s (nor end it).
    pub stall: bool,
}

impl Answer {
    pub fn new(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            content_type,
            fields: Vec::new(),
            body: body.into(),
            piece: 7,
            cut: false,
            stall: false,
        }
    }

    pub fn stall(mut self) -> Self {
        self.stall = true;
        self
    }

    pub fn cut(mut self) -> Self {
        self.cut = true;
        self
    }

    pub fn field(mut self, name: &'static str, value: &'static str) -> Self {
        self.fields.push((name, value));
        self
    }
}

/// The upstream's address; its threads end with the test process.
pub struct PieceUpstream {
    pub addr: SocketAddr,
}

/// Starts the upstream on a free loopback port, answering `answers` by
/// path (404 otherwise).
pub fn start_piece_upstream(answers: HashMap<&'static str, Answer>) -> PieceUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let answers = Arc::new(answers);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let answers = Arc::clone(&answers);
            std::thread::spawn(move || serve(stream, &answers));
        }
    });
    PieceUpstream { addr }
}

fn serve(stream: TcpStream, answers: &HashMap<&'static str, Answer>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    let mut accept_encoding = String::from("-");
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim().to_owned();
            if name.eq_ignore_ascii_case("accept-encoding") {
                accept_encoding = value;
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = std::io::Read::read_exact(&mut reader, &mut body);
    let path = first.split(' ').nth(1).unwrap_or("/").to_owned();
    let _ = match answers.get(path.as_str()) {
        Some(a) => answer(stream, a, &accept_encoding),
        None => (&stream)
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    };
}

fn answer(mut s: TcpStream, a: &Answer, accept_encoding: &str) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nx-seen-accept-encoding: {accept_encoding}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n",
        a.content_type
    );
    for (name, value) in &a.fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    for piece in a.body.chunks(a.piece.max(1)) {
        s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
        s.write_all(piece)?;
        s.write_all(b"\r\n")?;
        s.flush()?;
        // A pause now and then, so pieces reach the proxy apart.
        std::thread::sleep(Duration::from_micros(200));
    }
    if a.stall {
        std::thread::sleep(Duration::from_secs(30));
    }
    if !a.cut {
        s.write_all(b"0\r\n\r\n")?;
    }
    s.flush()?;
    // Cut: the connection closes without the last chunk.
    s.shutdown(std::net::Shutdown::Both)
}
