//! A test server's thread on a free loopback port: its own tokio
//! runtime (two workers) accepting until it is dropped, then stopped and
//! joined. The plain upstream (`start_upstream`), `llm_replay` and the
//! scripted gRPC peers (the rate limit recorder, the scripted RLQS
//! server, through [`LoopbackServer::serve`]) run on it; what they do
//! with a connection is theirs.

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
        Self::serve(|listener| async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                on_accept(stream);
            }
        })
    }

    /// Binds a free port and serves the gRPC services of `router` on it
    /// until the server is dropped.
    pub fn grpc(router: tonic::transport::server::Router) -> Self {
        Self::serve(|listener| async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = router.serve_with_incoming(incoming).await;
        })
    }

    /// Binds a free port and runs `serve` on its listener until the
    /// server is dropped (a server that does its own accepting, as
    /// tonic's does).
    pub fn serve<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                // Stopped without draining: Envoy keeps its connections
                // open as long as it runs.
                tokio::select! {
                    () = serve(listener) => {}
                    _ = stopped => {}
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
