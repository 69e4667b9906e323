//! Certificates shaped as Envoy Gateway's certgen makes them
//! (`internal/crypto/certgen.go`): one CA, RSA keys written as `RSA
//! PRIVATE KEY` (PKCS#1), leaf certificates with key usages only and no
//! extended key usage; Envoy Gateway's own for the name `envoy-gateway`
//! (its xDS server), the rate limit service's and Envoy's with CN `envoy`
//! and `*.<namespace>`. Made with the `openssl` program.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The namespace of the names, as Envoy Gateway's default install has it.
const NAMESPACE: &str = "envoy-gateway-system";

/// The files, in a temp dir removed on drop.
pub struct EgCerts {
    dir: tempfile::TempDir,
}

/// Runs `openssl` with `args` in `dir`; panics with its stderr when it
/// fails. The other test certificates (`llm_replay`) are made with it too.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install -y openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl EgCerts {
    /// The CA and the three leaves: `envoy-gateway`, `ratelimit` and `envoy`.
    pub fn generate() -> EgCerts {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        openssl(d, &["genrsa", "-traditional", "-out", "ca.key", "2048"]);
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-subj",
                "/CN=envoy-gateway",
                "-days",
                "2",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,digitalSignature",
                "-out",
                "ca.crt",
            ],
        );
        let gateway = format!(
            "DNS:envoy-gateway,DNS:envoy-gateway.{NAMESPACE},DNS:envoy-gateway.{NAMESPACE}.svc,\
             DNS:envoy-gateway.{NAMESPACE}.svc.cluster.local"
        );
        let wildcard = format!("DNS:*.{NAMESPACE}");
        for (leaf, cn, sans) in [
            ("envoy-gateway", "envoy-gateway", gateway.as_str()),
            ("ratelimit", "envoy", wildcard.as_str()),
            ("envoy", "envoy", wildcard.as_str()),
        ] {
            // certgen's KeyUsage, and no ExtKeyUsage at all.
            std::fs::write(
                d.join(format!("{leaf}.ext")),
                format!(
                    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,dataEncipherment,\
                     keyEncipherment,nonRepudiation\nsubjectAltName={sans}\n"
                ),
            )
            .expect("write ext");
            let key = format!("{leaf}.key");
            openssl(d, &["genrsa", "-traditional", "-out", &key, "2048"]);
            let csr = format!("{leaf}.csr");
            let subj = format!("/CN={cn}");
            openssl(
                d,
                &["req", "-new", "-key", &key, "-subj", &subj, "-out", &csr],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{leaf}.ext"),
                    "-out",
                    &format!("{leaf}.crt"),
                ],
            );
        }
        let key = std::fs::read_to_string(d.join("ratelimit.key")).expect("key");
        assert!(
            key.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
            "{key:.40}"
        );
        EgCerts { dir }
    }

    /// The CA every side trusts (`/certs/ca.crt`).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// `leaf`'s certificate (`envoy-gateway`, `ratelimit` or `envoy`).
    pub fn cert(&self, leaf: &str) -> PathBuf {
        self.dir.path().join(format!("{leaf}.crt"))
    }

    /// `leaf`'s key, PKCS#1.
    pub fn key(&self, leaf: &str) -> PathBuf {
        self.dir.path().join(format!("{leaf}.key"))
    }
}
