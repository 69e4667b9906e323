//! The `[admin]` table: the admin API's listener and its named bearer
//! tokens, written in the file (`token`) or read from one (`token_file`,
//! at load) (docs/config.md, "[admin]"; docs/admin.md).

use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::checker::{Checker, join};
use super::model::{AdminConfig, AdminToken};
use super::secret::read_secret_file;

const ADMIN_FIELDS: &[&str] = &["listen", "tokens"];
const TOKEN_FIELDS: &[&str] = &["name", "token", "token_file"];

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
                let (Some((name, name_span)), Some((token, token_span, from))) =
                    (self.string(o, &path, "name"), self.token(o, &header, &path))
                else {
                    continue;
                };
                let token = token.as_str();
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
                    self.error(
                        &token_span,
                        format!("{path}.{}", from.0),
                        format!("{}{problem}", from.1),
                    );
                } else if let Some(other) = admin.tokens.iter().find(|t| t.token == token) {
                    // (the audit log names the caller by its token)
                    self.error(
                        &token_span,
                        format!("{path}.{}", from.0),
                        format!(
                            "{}the same token as {:?}: each name needs its own",
                            from.1, other.name
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

    /// An entry's token: `token`, or the content of `token_file` (exactly
    /// one of them), its span, the field it came from and, for a file, the
    /// `PATH: ` its problems start with. Never in a message.
    fn token(
        &mut self,
        o: &DeTable<'_>,
        header: &std::ops::Range<usize>,
        path: &str,
    ) -> Option<(String, std::ops::Range<usize>, (&'static str, String))> {
        match (o.contains_key("token"), o.contains_key("token_file")) {
            (false, false) => {
                self.error(
                    header,
                    format!("{path}.token"),
                    "missing required field (or token_file)",
                );
                None
            }
            (true, true) => {
                let span = o
                    .get("token_file")
                    .map(toml::Spanned::span)
                    .unwrap_or_default();
                self.error(
                    &span,
                    format!("{path}.token_file"),
                    "give token or token_file, not both",
                );
                None
            }
            (true, false) => {
                let (token, span) = self.string(o, path, "token")?;
                Some((token.to_owned(), span, ("token", String::new())))
            }
            (false, true) => {
                let (file, span) = self.string(o, path, "token_file")?;
                let shown = Path::new(file).display().to_string();
                match read_secret_file(Path::new(file)) {
                    Ok(token) => Some((token, span, ("token_file", format!("{shown}: ")))),
                    Err(e) => {
                        self.error(&span, format!("{path}.token_file"), format!("{shown}: {e}"));
                        None
                    }
                }
            }
        }
    }
}
