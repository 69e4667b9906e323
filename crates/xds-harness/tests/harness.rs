//! The harness over the network, against the rules it mimics: a real ADS
//! client stream (envoy-types' stubs over tonic), stop and restart on the
//! same port, and the TLS it offers.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Streaming;
use xds_harness::{AdsServer, Event, RATE_LIMIT_CONFIG_TYPE, ServerTls};

const NODE: &str = "envoy-ratelimit";

struct Client {
    tx: mpsc::UnboundedSender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
}

impl Client {
    async fn connect(server: &AdsServer) -> Client {
        let url = format!("http://{}", server.addr());
        let mut client = AggregatedDiscoveryServiceClient::connect(url)
            .await
            .expect("connect");
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = client
            .stream_aggregated_resources(UnboundedReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        Client { tx, rx }
    }

    fn send(&self, version: &str, nonce: &str, error: Option<&str>) {
        let request = DiscoveryRequest {
            version_info: version.into(),
            node: Some(Node {
                id: NODE.into(),
                ..Node::default()
            }),
            type_url: RATE_LIMIT_CONFIG_TYPE.into(),
            response_nonce: nonce.into(),
            error_detail: error.map(|m| RpcStatus {
                message: m.into(),
                ..RpcStatus::default()
            }),
            ..DiscoveryRequest::default()
        };
        self.tx.send(request).expect("send");
    }

    async fn next(&mut self) -> DiscoveryResponse {
        self.rx.message().await.expect("a response").expect("open")
    }
}

fn configs(names: &[&str]) -> Vec<(String, Vec<u8>)> {
    names
        .iter()
        .map(|n| ((*n).to_owned(), n.as_bytes().to_vec()))
        .collect()
}

fn requests(events: &[Event]) -> usize {
    events.iter().filter(|e| e.request().is_some()).count()
}

#[tokio::test]
async fn versions_nonces_acks_and_the_nack_resend() {
    let server = AdsServer::start(None).await;
    let mut client = Client::connect(&server).await;
    client.send("", "", None);
    server
        .wait_for("the first request", |e| (requests(e) == 1).then_some(()))
        .await;
    assert!(server.events().iter().all(|e| e.response().is_none()));
    server.set_configs(NODE, "1", configs(&["a", "b"]));
    let r = client.next().await;
    assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("1", "1"));
    assert_eq!(r.resources.len(), 2);
    assert_eq!(r.type_url, RATE_LIMIT_CONFIG_TYPE);
    assert!(
        r.resources
            .iter()
            .all(|a| a.type_url == RATE_LIMIT_CONFIG_TYPE)
    );
    client.send("1", "1", None);
    server
        .wait_for("the ACK", |e| e.iter().find_map(Event::ack).map(|_| ()))
        .await;
    let sent = |e: &[Event]| e.iter().filter(|e| e.response().is_some()).count();
    assert_eq!(sent(&server.events()), 1, "an ACK waits");
    // A stale nonce is ignored.
    server.set_configs(NODE, "2", configs(&["bad"]));
    let r = client.next().await;
    assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("2", "2"));
    client.send("1", "1", None);
    let ignored = server
        .wait_for("the stale request", |e| {
            e.iter()
                .filter_map(|e| match e {
                    Event::Request { ignored, .. } => Some(*ignored),
                    _ => None,
                })
                .nth(2)
        })
        .await;
    assert!(ignored);
    // A NACK gets the same snapshot again, new nonce.
    client.send("1", "2", Some("domain x: bad"));
    let r = client.next().await;
    assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("2", "3"));
    assert_eq!(r.resources[0].value, b"bad");
    let nack = server
        .wait_for("the NACK", |e| e.iter().find_map(Event::nack).cloned())
        .await;
    assert_eq!(nack.version_info, "1");
    assert_eq!(nack.error_detail.expect("error").message, "domain x: bad");
    // A fixed snapshot ends the loop once acked.
    client.send("1", "3", Some("domain x: bad"));
    let r = client.next().await;
    assert_eq!(r.nonce, "4");
    server.set_configs(NODE, "3", configs(&["good"]));
    client.send("1", "4", Some("domain x: bad"));
    let r = client.next().await;
    assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("3", "5"));
}

#[tokio::test]
async fn stop_ends_streams_and_a_restart_on_the_port_starts_afresh() {
    let server = AdsServer::start(None).await;
    server.set_configs(NODE, "4", configs(&["a"]));
    let mut client = Client::connect(&server).await;
    client.send("", "", None);
    let r = client.next().await;
    assert_eq!(r.nonce, "1");
    let addr = server.stop().await;
    let ended = client.rx.message().await;
    match ended {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
        Ok(other) => panic!("the stream did not fail: {other:?}"),
    }
    let server = AdsServer::start_at(addr, None).await;
    assert_eq!(server.addr(), addr);
    assert!(server.snapshot(NODE).is_none(), "fresh state");
    server.set_configs(NODE, "1", configs(&["a"]));
    let mut client = Client::connect(&server).await;
    // The version the client held before is the new snapshot's: a new
    // stream is sent everything all the same.
    client.send("1", "1", None);
    let r = client.next().await;
    assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("1", "1"));
}

#[tokio::test]
async fn tls_is_1_3_with_h2_and_mtls_requires_a_client_certificate() {
    let pki = redis_harness::TestPki::generate("xds.test");
    let tls = ServerTls {
        cert: pki.server_cert(),
        key: pki.server_key(),
        client_ca: Some(pki.ca_cert()),
    };
    let server = AdsServer::start(Some(tls)).await;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(pki.ca_cert()).expect("ca");
    use rustls_pki_types::pem::PemObject;
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.expect("pem")).expect("ca");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let cert = rustls_pki_types::CertificateDer::pem_file_iter(pki.client_cert())
        .expect("cert")
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(pki.client_key()).expect("key");
    let mut with_cert = builder
        .clone()
        .with_client_auth_cert(cert, key)
        .expect("client auth");
    with_cert.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::try_from("xds.test").expect("name");
    let tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("tcp");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(with_cert))
        .connect(name.clone(), tcp)
        .await
        .expect("handshake");
    let (_, conn) = tls.get_ref();
    assert_eq!(
        conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    // Without a client certificate the server refuses the handshake.
    let mut without = builder.with_no_client_auth();
    without.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("tcp");
    if let Ok(mut tls) = tokio_rustls::TlsConnector::from(Arc::new(without))
        .connect(name, tcp)
        .await
    {
        // TLS 1.3: the client may finish first; the refusal comes on read.
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1];
        assert!(!matches!(tls.read(&mut buf).await, Ok(1)));
    }
    let error = server
        .wait_for("a refused handshake", |e| {
            e.iter().find_map(|e| match e {
                Event::HandshakeFailed { error } => Some(error.clone()),
                _ => None,
            })
        })
        .await;
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}
