//! Throwaway certificates for TLS tests ([`TestPki`]), made with the
//! `openssl` program (the harness stays `std` only), and the
//! [`RedisServer::start_tls`] that serves with them.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::server::{RedisServer, data_config};
use crate::util::{TempDir, free_port, run_bounded};

/// Bound on one `openssl` run.
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(30);

/// A CA, a server certificate for one DNS name (and no IP address: a
/// client dialling `127.0.0.1` must be told the name to verify) and a
/// client certificate, all EC P-256 in PEM, in a temp dir removed on drop.
/// A second, unrelated CA signs nothing here: trusting it instead fails.
///
/// ```no_run
/// let pki = redis_harness::TestPki::generate("redis.test");
/// let server = redis_harness::RedisServer::start_tls(&pki, true);
/// assert!(server.tls_url().starts_with("rediss://127.0.0.1:"));
/// assert!(pki.ca_cert().exists());
/// ```
#[derive(Debug)]
pub struct TestPki {
    dir: TempDir,
    server_name: String,
}

fn openssl(dir: &Path, args: &[&str]) {
    let bin = Path::new("openssl");
    let mut argv: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    // Relative names: every file is in `dir`.
    for a in &mut argv {
        if let Some(name) = a.strip_prefix('@') {
            *a = dir.join(name).display().to_string();
        }
    }
    let done = run_bounded(bin, &argv, OPENSSL_TIMEOUT);
    assert!(
        done.status.success(),
        "redis-harness: `openssl {}` failed ({}); is openssl installed \
         (apt-get install -y openssl)?\n{}{}",
        argv.join(" "),
        done.status,
        done.stdout,
        done.stderr
    );
}

impl TestPki {
    /// Makes the CA, a server certificate for `server_name` and a client
    /// certificate. Panics if `openssl` is missing or fails.
    #[must_use]
    pub fn generate(server_name: &str) -> TestPki {
        let dir = TempDir::new("pki");
        let d = dir.path();
        for ca in ["ca", "other-ca"] {
            openssl(
                d,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=tollgate test {ca}"),
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-keyout",
                    &format!("@{ca}.key"),
                    "-out",
                    &format!("@{ca}.crt"),
                ],
            );
        }
        for (leaf, cn, ext) in [
            (
                "server",
                server_name,
                format!("subjectAltName=DNS:{server_name}\nextendedKeyUsage=serverAuth\n"),
            ),
            (
                "client",
                "tollgate",
                "extendedKeyUsage=clientAuth\n".to_owned(),
            ),
        ] {
            let ext_file = d.join(format!("{leaf}.ext"));
            std::fs::write(
                &ext_file,
                format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{ext}"),
            )
            .unwrap_or_else(|e| panic!("redis-harness: cannot write {}: {e}", ext_file.display()));
            openssl(
                d,
                &[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-subj",
                    &format!("/CN={cn}"),
                    "-keyout",
                    &format!("@{leaf}.key"),
                    "-out",
                    &format!("@{leaf}.csr"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("@{leaf}.csr"),
                    "-CA",
                    "@ca.crt",
                    "-CAkey",
                    "@ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("@{leaf}.ext"),
                    "-out",
                    &format!("@{leaf}.crt"),
                ],
            );
        }
        TestPki {
            dir,
            server_name: server_name.to_owned(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The DNS name the server certificate holds (its only name).
    #[must_use]
    pub fn server_name(&self) -> &str {
        &self.server_name
    }

    /// The CA certificate that signed the server and client certificates.
    #[must_use]
    pub fn ca_cert(&self) -> PathBuf {
        self.file("ca.crt")
    }

    /// A CA certificate that signed neither.
    #[must_use]
    pub fn other_ca_cert(&self) -> PathBuf {
        self.file("other-ca.crt")
    }

    /// The server certificate.
    #[must_use]
    pub fn server_cert(&self) -> PathBuf {
        self.file("server.crt")
    }

    /// The server certificate's key.
    #[must_use]
    pub fn server_key(&self) -> PathBuf {
        self.file("server.key")
    }

    /// The client certificate (for `tls-auth-clients yes`).
    #[must_use]
    pub fn client_cert(&self) -> PathBuf {
        self.file("client.crt")
    }

    /// The client certificate's key (PKCS#8 PEM).
    #[must_use]
    pub fn client_key(&self) -> PathBuf {
        self.file("client.key")
    }
}

impl RedisServer {
    /// Starts a standalone server that also takes TLS connections on
    /// [`tls_port`](Self::tls_port), with `pki`'s server certificate; with
    /// `auth_clients`, a TLS client must show a certificate `pki`'s CA
    /// signed (`tls-auth-clients yes`). The plain port stays open, for the
    /// harness's own commands.
    #[must_use]
    pub fn start_tls(pki: &TestPki, auth_clients: bool) -> RedisServer {
        let tls_port = Cell::new(0);
        let quoted = |p: PathBuf| format!("\"{}\"", p.display());
        let mut server =
            RedisServer::launch(crate::server::Kind::Server, "tls", false, &|port, dir| {
                tls_port.set(free_port(false));
                let extra = [
                    format!("tls-port {}", tls_port.get()),
                    format!("tls-cert-file {}", quoted(pki.server_cert())),
                    format!("tls-key-file {}", quoted(pki.server_key())),
                    format!("tls-ca-cert-file {}", quoted(pki.ca_cert())),
                    format!(
                        "tls-auth-clients {}",
                        if auth_clients { "yes" } else { "no" }
                    ),
                ];
                data_config(port, dir, &extra)
            });
        server.tls_port = Some(tls_port.get());
        server
    }
}
