//! The OpenAPI document (`crates/tollgate-server/openapi.json`) against
//! the real binary: `GET /openapi.json` serves the committed file, which
//! is OpenAPI 3.1; and the document lists exactly the paths and methods
//! each door routes, read from the doors' own 405 `Allow` answers.
//! (`scripts/api-fuzz.sh` then holds every answer to it with schemathesis.)

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde_json::Value;

use crate::support::{Tollgate, get, request};

const COMMITTED: &str = include_str!("../../openapi.json");
const TOKEN: &str = "oncall-0123456789abcdef";
const CONFIG: &str = "[store]\nurl = \"memory\"\n\n\
     [admin]\n[[admin.tokens]]\nname = \"oncall\"\ntoken = \"oncall-0123456789abcdef\"\n\n\
     [[rules]]\nname = \"api\"\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1s\"\n";

#[test]
fn the_served_document_is_the_committed_openapi_3_1_file() {
    let s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0"]);
    let r = get(s.api(), "/openapi.json");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(
        r.text() == COMMITTED,
        "GET /openapi.json is not the committed file"
    );
    let doc: Value = serde_json::from_str(COMMITTED).expect("openapi.json parses as JSON");
    let version = doc["openapi"].as_str().expect("an `openapi` string");
    assert!(
        version.starts_with("3.1."),
        "openapi {version:?}, not 3.1.x"
    );

    let head = request(s.api(), "HEAD", "/openapi.json", &[], b"");
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(COMMITTED.len().to_string().as_str())
    );
    assert!(head.body.is_empty());
}

/// Each documented path with its methods (uppercase), `{param}`s filled.
fn documented(admin: bool) -> Vec<(String, BTreeSet<String>)> {
    let doc: Value = serde_json::from_str(COMMITTED).expect("openapi.json parses as JSON");
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .filter(|(path, _)| path.starts_with("/admin/") == admin)
        .map(|(path, item)| {
            let methods = item
                .as_object()
                .expect("a path item")
                .keys()
                .filter(|m| *m != "parameters")
                .map(|m| m.to_uppercase())
                .collect();
            let filled = path.replace("{rule}", "api").replace("{key}", "k");
            (filled, methods)
        })
        .collect()
}

/// The methods a door says `path` takes when asked with an unlisted one.
fn allowed(addr: SocketAddr, path: &str, auth: Option<&str>) -> BTreeSet<String> {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    let r = request(addr, "PATCH", path, &headers, b"");
    assert_eq!(r.status, 405, "PATCH {path}: {}", r.text());
    let allow = r
        .header("allow")
        .unwrap_or_else(|| panic!("PATCH {path}: a 405 without Allow"));
    allow.split(',').map(|m| m.trim().to_owned()).collect()
}

#[test]
fn the_document_lists_the_paths_and_methods_each_door_routes() {
    let s = Tollgate::start(CONFIG, &["--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"]);
    let api = documented(false);
    assert!(api.len() >= 13, "{api:?}");
    for (path, methods) in &api {
        assert_eq!(&allowed(s.api(), path, None), methods, "{path}");
    }
    let admin = documented(true);
    assert!(admin.len() >= 7, "{admin:?}");
    let bearer = format!("Bearer {TOKEN}");
    for (path, methods) in &admin {
        assert_eq!(&allowed(s.admin(), path, Some(&bearer)), methods, "{path}");
    }
}
