//! A tiny blocking RESP2 client over `std::net::TcpStream`, enough for the
//! harness to control and inspect servers with bounded waits.

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply from a Redis server.
///
/// An error *reply* (`-ERR …`) is a [`Reply::Error`] value, not an `Err`: the
/// harness's `Err`s are I/O failures (refused, timed out, closed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// A simple string, e.g. `OK` or `PONG`.
    Status(String),
    /// An error reply, e.g. `NOSCRIPT No matching script…`.
    Error(String),
    /// An integer reply.
    Int(i64),
    /// A bulk string (binary-safe).
    Bulk(Vec<u8>),
    /// A nil bulk string or nil array.
    Nil,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// `true` for [`Reply::Error`].
    #[must_use]
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The text of a status, error or bulk reply (bulk decoded lossily as
    /// UTF-8); `None` for other kinds.
    #[must_use]
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Status(s) | Reply::Error(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The value of an integer reply.
    #[must_use]
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of an array reply.
    #[must_use]
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Renders like `redis-cli` in raw mode: one line per element, nil as empty.
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) | Reply::Error(s) => f.write_str(s),
            Reply::Int(i) => write!(f, "{i}"),
            Reply::Bulk(b) => f.write_str(&String::from_utf8_lossy(b)),
            Reply::Nil => Ok(()),
            Reply::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// One connection; every read and write is bounded by the timeout given to
/// [`Conn::connect`].
pub(crate) struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    pub(crate) fn connect(port: u16, timeout: Duration) -> io::Result<Conn> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply.
    pub(crate) fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Reply> {
        let mut frame = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            let arg = arg.as_ref();
            frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            frame.extend_from_slice(arg);
            frame.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&frame).map_err(timed_out)?;
        read_reply(&mut self.reader).map_err(timed_out)
    }
}

/// Socket timeouts surface as `WouldBlock` on Unix; call them what they are.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "no reply within the timeout")
    } else {
        e
    }
}

fn protocol(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(protocol(format!(
            "unterminated line {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|e| protocol(format!("non-UTF-8 line: {e}")))
}

fn read_len(s: &str) -> io::Result<Option<usize>> {
    let n: i64 = s
        .parse()
        .map_err(|e| protocol(format!("bad length {s:?}: {e}")))?;
    if n < 0 {
        Ok(None)
    } else {
        usize::try_from(n)
            .map(Some)
            .map_err(|e| protocol(format!("bad length {s:?}: {e}")))
    }
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => rest
            .parse()
            .map(Reply::Int)
            .map_err(|e| protocol(format!("bad integer {rest:?}: {e}"))),
        "$" => match read_len(rest)? {
            None => Ok(Reply::Nil),
            Some(len) => {
                let mut buf = vec![0; len + 2];
                r.read_exact(&mut buf)?;
                if !buf.ends_with(b"\r\n") {
                    return Err(protocol("bulk string not followed by CRLF".to_owned()));
                }
                buf.truncate(len);
                Ok(Reply::Bulk(buf))
            }
        },
        "*" => match read_len(rest)? {
            None => Ok(Reply::Nil),
            Some(len) => (0..len)
                .map(|_| read_reply(r))
                .collect::<io::Result<Vec<_>>>()
                .map(Reply::Array),
        },
        _ => Err(protocol(format!("unknown reply type in {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut BufReader::new(bytes))
    }

    #[test]
    fn parses_every_resp2_kind() {
        assert_eq!(parse(b"+OK\r\n").ok(), Some(Reply::Status("OK".into())));
        assert_eq!(
            parse(b"-ERR x\r\n").ok(),
            Some(Reply::Error("ERR x".into()))
        );
        assert_eq!(parse(b":-2\r\n").ok(), Some(Reply::Int(-2)));
        assert_eq!(parse(b"$-1\r\n").ok(), Some(Reply::Nil));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").ok(),
            Some(Reply::Bulk(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*2\r\n$1\r\nk\r\n*0\r\n").ok(),
            Some(Reply::Array(vec![
                Reply::Bulk(b"k".to_vec()),
                Reply::Array(vec![])
            ]))
        );
    }

    #[test]
    fn rejects_truncated_input() {
        assert!(parse(b"$5\r\nab").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b"?x\r\n").is_err());
    }
}
