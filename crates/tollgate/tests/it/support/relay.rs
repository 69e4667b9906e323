//! A loopback TCP relay in front of a real `redis-server`, for fault tests
//! that need a network path to misbehave in a precise way (Redis itself
//! stays real): each connection through it gets a fresh `cut` flag, the
//! client's bytes pass unless `to_server` says otherwise, and the server's
//! reach the client after the pause `to_client` asks for.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Starts the relay to `upstream` and returns its port. Per chunk read,
/// with the connection's `cut` flag: `to_server(bytes, cut)` whether to
/// pass the client's bytes on; `to_client(bytes, cut)` how long to hold
/// the server's back first.
pub(crate) fn relay(
    upstream: String,
    to_server: impl Fn(&[u8], &AtomicBool) -> bool + Send + Sync + 'static,
    to_client: impl Fn(&[u8], &AtomicBool) -> Duration + Send + Sync + 'static,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a relay port");
    let port = listener.local_addr().expect("the relay's address").port();
    let (to_server, to_client) = (Arc::new(to_server), Arc::new(to_client));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut server = TcpStream::connect(&upstream).expect("connect upstream");
            let cut = Arc::new(AtomicBool::new(false));
            let (mut c, mut s) = (
                client.try_clone().expect("clone the client socket"),
                server.try_clone().expect("clone the server socket"),
            );
            let (pass, cut_in) = (to_server.clone(), cut.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    if pass(&buf[..n], &cut_in) && s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
            let hold = to_client.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = server.read(&mut buf) {
                    std::thread::sleep(hold(&buf[..n], &cut));
                    if client.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}
