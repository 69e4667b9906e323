//! A test server's thread on a free loopback port: its own tokio
//! runtime (two workers) accepting until it is dropped, then stopped and
//! joined. The plain upstream (`start_upstream`) and `llm_replay` run on
//! it; what they do with a connection is theirs.

use std::net::SocketAddr;

/// The running thread; stopped and joined on drop.
pub struct LoopbackServer {
    /// Its address.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackServer {
    /// Binds a free port and hands every accepted stream to `on_accept`,
    /// called on the runtime (so it may `tokio::spawn`).
    pub fn start(mut on_accept: impl FnMut(tokio::net::TcpStream) + Send + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            on_accept(stream);
                        }
                    }
                }
            });
        });
        LoopbackServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
