//! The `[admin]` table: the admin API's listener and its named bearer
//! tokens (docs/config.md, "[admin]"; docs/admin.md).

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{AdminConfig, AdminToken};

const ADMIN_FIELDS: &[&str] = &["listen", "tokens"];
const TOKEN_FIELDS: &[&str] = &["name", "token"];

/// What is wrong with an admin token, if anything: it must be at least 16
/// characters, all visible ASCII (no spaces: it travels in an
/// `Authorization` header, whose value loses its outer whitespace, so a
/// token with any could never match). The rule for `[[admin.tokens]]` and
/// `TOLLGATE_ADMIN_TOKEN` alike (docs/admin.md).
#[must_use]
pub fn token_problem(token: &str) -> Option<&'static str> {
    if token.len() < 16 {
        Some("a token must be at least 16 characters")
    } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
        Some("a token must be visible ASCII characters, without spaces")
    } else {
        None
    }
}

impl Checker<'_> {
    pub(super) fn admin(&mut self, t: &DeTable<'_>) -> Option<AdminConfig> {
        let path = "admin";
        let before = self.errors.len();
        self.unknown_fields(t, path, ADMIN_FIELDS);
        let mut admin = AdminConfig {
            listen: self.socket_addr(t, path, "listen"),
            tokens: Vec::new(),
        };
        if let Some(value) = t.get("tokens") {
            let field = join(path, "tokens");
            let DeValue::Array(items) = value.get_ref() else {
                self.wrong_type(value, &field, "an array of tables ([[admin.tokens]])");
                return None;
            };
            for (i, item) in items.iter().enumerate() {
                let path = format!("{field}[{i}]");
                let DeValue::Table(o) = item.get_ref() else {
                    self.wrong_type(item, &path, "a table ([[admin.tokens]])");
                    continue;
                };
                self.unknown_fields(o, &path, TOKEN_FIELDS);
                let header = item.span();
                self.required(o, &header, &path, "name");
                self.required(o, &header, &path, "token");
                let (Some((name, name_span)), Some((token, token_span))) = (
                    self.string(o, &path, "name"),
                    self.string(o, &path, "token"),
                ) else {
                    continue;
                };
                if name.is_empty() || name == "env" {
                    self.error(
                        &name_span,
                        format!("{path}.name"),
                        "a token needs a name, and `env` is TOLLGATE_ADMIN_TOKEN's",
                    );
                } else if admin.tokens.iter().any(|t| t.name == name) {
                    self.error(
                        &name_span,
                        format!("{path}.name"),
                        format!("{name:?} names another token already"),
                    );
                } else if let Some(problem) = token_problem(token) {
                    self.error(&token_span, format!("{path}.token"), problem);
                } else if let Some(other) = admin.tokens.iter().find(|t| t.token == token) {
                    // (the audit log names the caller by its token)
                    self.error(
                        &token_span,
                        format!("{path}.token"),
                        format!(
                            "the same token as {:?}: each name needs its own",
                            other.name
                        ),
                    );
                } else {
                    admin.tokens.push(AdminToken {
                        name: name.to_owned(),
                        token: token.to_owned(),
                    });
                }
            }
        }
        (self.errors.len() == before).then_some(admin)
    }
}
