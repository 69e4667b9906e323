//! A tonic service served on a free loopback port in its own thread and
//! runtime, for the scripted gRPC peers of the tests (the rate limit
//! service recorder, the scripted RLQS server); stopped on drop, without
//! draining: Envoy keeps its connections open as long as it runs.

use std::net::SocketAddr;

/// The serving thread; dropping it stops the server and joins it.
pub struct GrpcThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GrpcThread {
    /// Serves `routes` (`tonic::service::Routes::new(service)`) on
    /// `127.0.0.1:0`; returns the bound address and the thread.
    pub fn start(routes: tonic::service::Routes) -> (SocketAddr, GrpcThread) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a gRPC peer");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let serve = tonic::transport::Server::builder()
                    .add_routes(routes)
                    .serve_with_incoming(incoming);
                tokio::select! {
                    _ = serve => {}
                    _ = stopped => {}
                }
            });
        });
        (
            addr,
            GrpcThread {
                stop: Some(stop),
                thread: Some(thread),
            },
        )
    }
}

impl Drop for GrpcThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
