//! Secrets the Kubernetes way (docs/config.md, "Secrets"), against the real
//! binary and real `redis-server`s: the Redis password from a file and from
//! `TOLLGATE_REDIS_PASSWORD` reaching a `requirepass` server and an ACL
//! user; `[store.tls]` (CA, client certificate, server name) on a TLS
//! Redis; admin tokens from files; and none of them ever printed: not by
//! `validate`, the serve log (start, store errors, reloads), `GET
//! /v1/rules`, an error, or `Debug`.

use std::path::{Path, PathBuf};

use redis_harness::{RedisServer, TestPki};

use crate::support::{self, Tollgate, get, post_json, request, serve_output_with_env};

const PASSWORD: &str = "pw-from-a-secret-7f3a";
const TOKEN: &str = "admin-token-from-a-file-91c2";

fn rule() -> &'static str {
    "[[rules]]\nname = \"api\"\nalgorithm = \"fixed_window\"\nlimit = 3\nperiod = \"1h\"\n"
}

/// A file in `dir` holding `text`.
fn secret_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write secret");
    path
}

/// A server that wants [`PASSWORD`] (set after the start: the harness's
/// readiness probe does not log in).
fn with_password() -> RedisServer {
    let redis = RedisServer::start();
    assert_eq!(redis.cli(&["CONFIG", "SET", "requirepass", PASSWORD]), "OK");
    redis
}

fn admitted(s: &Tollgate, key: &str) -> bool {
    let r = post_json(
        s.api(),
        "/v1/check",
        &format!(r#"{{"rule":"api","key":"{key}"}}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["allowed"].as_bool().expect("allowed")
}

/// The keys the store wrote, read with the password.
fn keys(redis: &RedisServer) -> Vec<redis_harness::Reply> {
    redis.pipeline(&[&["AUTH", PASSWORD], &["KEYS", "tollgate:*"]])
}

fn validate(config: &str) -> std::process::Output {
    let (_dir, path) = support::config_file(config);
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("validate")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run validate")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `[store] password_file` (with the newline `echo` leaves) reaches a
/// `requirepass` server; the password shows nowhere: not in `validate`'s
/// summary (which names the file), the serve log, `/v1/rules`, the store
/// errors once Redis is gone, nor the reload that notices the file
/// changed (reported as needing a restart).
#[test]
fn a_password_file_reaches_redis_and_is_never_shown() {
    let redis = with_password();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = secret_file(dir.path(), "redis-password", &format!("{PASSWORD}\n"));
    let config = format!(
        "[store]\nurl = \"{}\"\npassword_file = \"{}\"\ntimeout = \"500ms\"\n\n{}",
        redis.url(),
        file.display(),
        rule()
    );
    let out = validate(&config);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!(
            "password from [store] password_file {}",
            file.display()
        )),
        "{shown}"
    );
    assert!(!shown.contains(PASSWORD), "{shown}");

    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    assert!(admitted(&s, "alice"));
    assert!(
        matches!(&keys(&redis)[1], redis_harness::Reply::Array(k) if !k.is_empty()),
        "the check wrote its key"
    );
    let rules = get(s.api(), "/v1/rules");
    assert_eq!(rules.status, 200);
    assert!(!rules.text().contains(PASSWORD), "{}", rules.text());

    std::fs::write(&file, "a-rotated-password\n").expect("rotate");
    s.signal("HUP");
    assert!(s.logs("[store] password_file changed"), "{}", s.log());
    redis.stop();
    assert!(admitted(&s, "bob"), "on_error allow answers");
    let log = s.log();
    assert!(!log.contains(PASSWORD), "{log}");
    assert!(!log.contains("a-rotated-password"), "{log}");
}

/// `TOLLGATE_REDIS_PASSWORD` (one trailing newline trimmed) reaches the
/// server too; a wrong one stops `serve` with Redis's refusal and not the
/// password; a URL's password is not shown either, and with the variable
/// as well, the error names both sources.
#[test]
fn the_password_from_the_environment_reaches_redis_and_errors_hide_it() {
    let redis = with_password();
    let config = format!("[store]\nurl = \"{}\"\n\n{}", redis.url(), rule());
    let s = Tollgate::start_with_env(
        Some(&config),
        &["--http", "127.0.0.1:0"],
        &[("TOLLGATE_REDIS_PASSWORD", &format!("{PASSWORD}\n"))],
    );
    assert!(admitted(&s, "alice"));
    assert!(!s.log().contains(PASSWORD), "{}", s.log());
    drop(s);

    let wrong = "not-the-password-4411";
    let out = serve_output_with_env(
        &config,
        &["--http", "127.0.0.1:0"],
        &[("TOLLGATE_REDIS_PASSWORD", wrong)],
    );
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("WRONGPASS"), "{shown}");
    assert!(!shown.contains(wrong), "{shown}");

    let in_url = format!(
        "[store]\nurl = \"redis://:{PASSWORD}@{}\"\n\n{}",
        redis.addr(),
        rule()
    );
    // A URL's password is used and shown nowhere either.
    let out = validate(&in_url);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    let s = Tollgate::start(&in_url, &["--http", "127.0.0.1:0"]);
    assert!(admitted(&s, "bob"));
    let rules = get(s.api(), "/v1/rules").text();
    assert!(!rules.contains(PASSWORD), "{rules}");
    assert!(!s.log().contains(PASSWORD), "{}", s.log());
    drop(s);
    let out = serve_output_with_env(
        &in_url,
        &["--http", "127.0.0.1:0"],
        &[("TOLLGATE_REDIS_PASSWORD", wrong)],
    );
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("given twice, by the store url and by TOLLGATE_REDIS_PASSWORD"),
        "{shown}"
    );
    assert!(
        !shown.contains(PASSWORD) && !shown.contains(wrong),
        "{shown}"
    );
}

/// `[store] username` with the password file logs in as that ACL user.
#[test]
fn an_acl_user_logs_in_with_username_and_password_file() {
    let redis = RedisServer::start();
    let created = redis.cli(&[
        "ACL",
        "SETUSER",
        "tollgate",
        "on",
        &format!(">{PASSWORD}"),
        "~tollgate:*",
        "+@all",
    ]);
    assert_eq!(created.trim(), "OK");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = secret_file(dir.path(), "redis-password", PASSWORD);
    let config = format!(
        "[store]\nurl = \"{}\"\nusername = \"tollgate\"\npassword_file = \"{}\"\n\n{}",
        redis.url(),
        file.display(),
        rule()
    );
    let s = Tollgate::start(&config, &["--http", "127.0.0.1:0"]);
    assert!(admitted(&s, "alice"));
    let clients = redis.cli(&["CLIENT", "LIST"]);
    assert!(clients.contains("user=tollgate"), "{clients}");
}

/// `[store.tls]` on a TLS Redis that wants client certificates, whose
/// certificate names `redis.test` only: with the CA, the client
/// certificate and `server_name`, checks run; without `server_name`,
/// `serve` stops with rustls's name error.
#[test]
fn store_tls_with_ca_client_certificate_and_server_name() {
    let pki = TestPki::generate("redis.test");
    let redis = RedisServer::start_tls(&pki, true);
    let tls = format!(
        "[store.tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pki.ca_cert().display(),
        pki.client_cert().display(),
        pki.client_key().display()
    );
    let config = |name: &str| {
        format!(
            "[store]\nurl = \"{}\"\ntimeout = \"2s\"\n\n{tls}{name}\n{}",
            redis.tls_url(),
            rule()
        )
    };
    let named = config("server_name = \"redis.test\"\n");
    let out = validate(&named);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("server_name redis.test"),
        "{}",
        text(&out)
    );
    let s = Tollgate::start(&named, &["--http", "127.0.0.1:0"]);
    assert!(admitted(&s, "alice"));
    drop(s);

    let out = serve_output_with_env(&config(""), &["--http", "127.0.0.1:0"], &[]);
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("certificate not valid for name \"127.0.0.1\""),
        "{shown}"
    );
}

/// Every problem with a secret or certificate file is a `validate` error
/// at its field naming the file, never quoting what it holds.
#[test]
fn secret_file_problems_name_the_file_and_never_the_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let empty = secret_file(d, "empty", "\n");
    let secret = secret_file(d, "pw", PASSWORD);
    let not_pem = secret_file(d, "not-pem", &format!("{PASSWORD}\n"));
    let short = secret_file(d, "short", "short-but-secret\n".get(..13).expect("13"));
    let missing = d.join("missing");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            format!(
                "[store]\nurl = \"redis://h:1\"\npassword_file = \"{}\"\n",
                missing.display()
            ),
            vec![format!(
                "store.password_file: {}: cannot read",
                missing.display()
            )],
        ),
        (
            format!(
                "[store]\nurl = \"redis://h:1\"\npassword_file = \"{}\"\n",
                empty.display()
            ),
            vec![format!(
                "store.password_file: {}: the file is empty",
                empty.display()
            )],
        ),
        (
            format!(
                "[store]\nurl = \"redis://:inline-pw@h:1\"\npassword_file = \"{}\"\n",
                secret.display()
            ),
            vec!["store.password_file: the password is given twice".to_owned()],
        ),
        (
            format!(
                "[store]\nurl = \"rediss://h:1\"\n[store.tls]\nca_file = \"{}\"\n",
                not_pem.display()
            ),
            vec![format!(
                "store.tls.ca_file: {}: no certificate found (PEM expected)",
                not_pem.display()
            )],
        ),
        (
            format!(
                "[store]\nurl = \"rediss://h:1\"\n[store.tls]\nkey_file = \"{}\"\n",
                not_pem.display()
            ),
            vec![
                format!(
                    "store.tls.key_file: {}: no private key found",
                    not_pem.display()
                ),
                "store.tls.cert_file: key_file needs cert_file".to_owned(),
            ],
        ),
        (
            "[store]\nurl = \"redis://h:1\"\n[store.tls]\nserver_name = \"redis.test\"\n"
                .to_owned(),
            vec!["store.tls: [store.tls] is for a rediss:// url".to_owned()],
        ),
        (
            format!(
                "[admin]\n[[admin.tokens]]\nname = \"ops\"\ntoken_file = \"{}\"\n",
                short.display()
            ),
            vec![format!(
                "admin.tokens[0].token_file: {}: a token must be at least 16 characters",
                short.display()
            )],
        ),
        (
            format!(
                "[admin]\n[[admin.tokens]]\nname = \"ops\"\ntoken = \"{TOKEN}\"\ntoken_file = \"{}\"\n",
                secret.display()
            ),
            vec!["admin.tokens[0].token_file: give token or token_file, not both".to_owned()],
        ),
    ];
    for (config, problems) in cases {
        let out = validate(&format!("{config}\n{}", rule()));
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(1), "{config}\n{shown}");
        for p in problems {
            assert!(shown.contains(&p), "{config}\nwanted {p:?} in:\n{shown}");
        }
        for secret in [PASSWORD, "short-but-se", "inline-pw", TOKEN] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}

/// Admin tokens from files: `[[admin.tokens]] token_file` and
/// `TOLLGATE_ADMIN_TOKEN_FILE` both open the admin API; neither token is
/// logged, nor shown by `validate`.
#[test]
fn admin_tokens_from_files_open_the_admin_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = secret_file(dir.path(), "oncall", &format!("{TOKEN}\n"));
    let env_token = "env-token-from-a-file-5e7d";
    let env_file = secret_file(dir.path(), "env", &format!("{env_token}\r\n"));
    let config = format!(
        "[admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken_file = \"{}\"\n\n{}",
        file.display(),
        rule()
    );
    let out = validate(&config);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(TOKEN), "{}", text(&out));
    let env_path = env_file.display().to_string();
    let s = Tollgate::start_with_env(
        Some(&config),
        &["--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
        &[("TOLLGATE_ADMIN_TOKEN_FILE", &env_path)],
    );
    let admin = s.admin();
    for (token, status) in [
        (TOKEN, 200),
        (env_token, 200),
        ("wrong-token-0000000000", 401),
    ] {
        let auth = format!("Bearer {token}");
        let r = request(
            admin,
            "GET",
            "/admin/v1/overrides",
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(r.status, status, "{token}: {}", r.text());
    }
    let log = s.log();
    assert!(!log.contains(TOKEN) && !log.contains(env_token), "{log}");
}

/// `Debug` of the loaded config shows where secrets came from, never them:
/// the password file's, a URL's password, a token file's, a client key.
#[test]
fn debug_of_the_config_hides_every_secret() {
    let pki = TestPki::generate("redis.test");
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = secret_file(dir.path(), "pw", PASSWORD);
    let token = secret_file(dir.path(), "token", TOKEN);
    let key = std::fs::read_to_string(pki.client_key()).expect("key");
    let key_body: String = key.lines().nth(1).expect("a base64 line").to_owned();
    let config = format!(
        "[store]\nurl = \"rediss://cache:6380\"\npassword_file = \"{}\"\n\
         [store.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
         [admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken_file = \"{}\"\n\n{}",
        pw.display(),
        pki.client_cert().display(),
        pki.client_key().display(),
        token.display(),
        rule()
    );
    let loaded = tollgate_server::config::Config::parse(&config, "t.toml").expect("valid");
    let in_url = tollgate_server::config::Config::parse(
        &format!("[store]\nurl = \"redis://u:{PASSWORD}@h:1\"\n\n{}", rule()),
        "u.toml",
    )
    .expect("valid");
    for shown in [format!("{loaded:?}"), format!("{in_url:?}")] {
        assert!(!shown.contains(PASSWORD), "{shown}");
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(!shown.contains(&key_body), "{shown}");
    }
    assert!(
        format!("{loaded:?}").contains("password_file"),
        "the source is shown"
    );
}

/// `validate` holds the config to what `serve` checks when it opens the
/// store, in the same environment: a password in `password_file` and in
/// `TOLLGATE_REDIS_PASSWORD` is refused by both, naming the two sources
/// and neither value; the variable alone is named as the source.
#[test]
fn validate_refuses_a_password_from_the_file_and_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = secret_file(dir.path(), "pw", PASSWORD);
    let env_password = "env-only-secret-value";
    let run = |config: &str| {
        let (_dir, path) = support::config_file(config);
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("validate")
            .arg("--config")
            .arg(&path)
            .env("TOLLGATE_REDIS_PASSWORD", env_password)
            .output()
            .expect("run validate")
    };
    let rule = "[[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    let both = run(&format!(
        "[store]\nurl = \"redis://h:1\"\npassword_file = \"{}\"\n\n{rule}",
        file.display()
    ));
    let shown = text(&both);
    assert!(!both.status.success(), "{shown}");
    assert!(
        shown.contains("the Redis password is given twice, by [store] password_file")
            && shown.contains("TOLLGATE_REDIS_PASSWORD"),
        "{shown}"
    );
    assert!(
        !shown.contains(PASSWORD) && !shown.contains(env_password),
        "{shown}"
    );

    let env_only = run(&format!("[store]\nurl = \"redis://h:1\"\n\n{rule}"));
    let shown = text(&env_only);
    assert!(env_only.status.success(), "{shown}");
    assert!(
        shown.contains("store: password from TOLLGATE_REDIS_PASSWORD"),
        "{shown}"
    );
    assert!(!shown.contains(env_password), "{shown}");

    // the memory store takes no password: the variable is not named
    let memory = run(&format!("[store]\nurl = \"memory\"\n\n{rule}"));
    let shown = text(&memory);
    assert!(memory.status.success(), "{shown}");
    assert!(!shown.contains("TOLLGATE_REDIS_PASSWORD"), "{shown}");
}

/// `validate` reads serve's `TOLLGATE_STORE` and `TOLLGATE_UPSTREAM` (and
/// takes `--store`), so a config whose store URL or upstream comes from
/// the environment (a systemd unit's `ExecReload` runs validate first)
/// passes where `serve` would run it, and an empty variable counts as
/// unset as it does for `serve`.
#[test]
fn validate_takes_the_store_and_upstream_from_serves_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = secret_file(dir.path(), "pw", PASSWORD);
    let config = format!(
        "[store]\npassword_file = \"{}\"\n\n[proxy]\nlisten = \"127.0.0.1:0\"\n\n\
         [[rules]]\nname = \"r\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n",
        file.display()
    );
    let (_cfg, path) = support::config_file(&config);
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("validate")
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_remove("TOLLGATE_STORE")
            .env_remove("TOLLGATE_UPSTREAM")
            .envs(env.iter().copied())
            .output()
            .expect("run validate");
        (out.status.success(), text(&out))
    };
    let (ok, shown) = run(
        &[
            ("TOLLGATE_STORE", "redis://127.0.0.1:1"),
            ("TOLLGATE_UPSTREAM", "http://127.0.0.1:9"),
        ],
        &[],
    );
    assert!(ok, "{shown}");
    assert!(shown.contains("store: redis://127.0.0.1:1/0"), "{shown}");
    let (ok, shown) = run(
        &[("TOLLGATE_UPSTREAM", "http://127.0.0.1:9")],
        &["--store", "redis://h:2"],
    );
    assert!(ok && shown.contains("store: redis://h:2/0"), "{shown}");
    // without them: the memory store takes no password file, and the
    // proxy has no upstream; empty variables are unset
    let (ok, shown) = run(&[("TOLLGATE_STORE", ""), ("TOLLGATE_UPSTREAM", "")], &[]);
    assert!(!ok && shown.contains("needs an upstream"), "{shown}");
    let (ok, shown) = run(
        &[("TOLLGATE_STORE", "")],
        &["--upstream", "http://127.0.0.1:9"],
    );
    assert!(!ok && shown.contains("are for a Redis store"), "{shown}");
    // a store URL's password is not shown by validate's errors either
    let (ok, shown) = run(&[("TOLLGATE_STORE", "redis://:a/SECRET@h:0")], &[]);
    assert!(!ok && !shown.contains("SECRET"), "{shown}");
}
