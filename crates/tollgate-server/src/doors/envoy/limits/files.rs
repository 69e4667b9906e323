//! Each file checked to its domain, and the entry points
//! [`EnvoyLimits::load`] and [`EnvoyLimits::parse`].

use std::path::PathBuf;
use std::rc::Rc;

use super::loader::Loader;
use super::tree::EnvoyLimits;
use super::yaml::{Value, Yaml, read_yaml};
use crate::config::file::{ConfigError, ConfigErrors};

const ROOT_FIELDS: &[&str] = &["domain", "descriptors"];

/// A top-level `name` is not in the reference's schema but in Envoy
/// Gateway's rendered configs and `egctl x config envoy-ratelimit` output
/// (the xDS resource's name); the reference accepts it, as it accepts any
/// of its keys at any level, and ignores it. So does this loader, after
/// checking it is a string; it is left out of the "expected one of" list,
/// as it means nothing here.
const IGNORED_ROOT_FIELD: &str = "name";

impl Loader {
    /// Checks one file's text and adds its domain.
    pub(super) fn file(&mut self, file: &str, text: &str) {
        // A byte order mark is not part of the YAML (yaml.v2 skips it too).
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        file.clone_into(&mut self.file);
        let start = self.errors.len();
        match read_yaml(text) {
            Err((line, message)) => self.file_error(file, Some(line), message),
            Ok(root) => self.root(root.as_ref()),
        }
        self.errors[start..].sort_by_key(|e| e.line.unwrap_or(0));
    }

    /// Checks one file's (or xDS resource's) top mapping and adds its
    /// domain.
    pub(super) fn root(&mut self, root: Option<&Yaml>) {
        let empty = Yaml {
            line: 1,
            value: Rc::new(Value::Null),
        };
        let root = root.unwrap_or(&empty);
        if matches!(&*root.value, Value::Seq(_) | Value::Scalar { .. }) {
            let found = root.found();
            self.errors.push(ConfigError {
                file: self.file.clone(),
                line: Some(root.line),
                field: None,
                message: format!("expected a mapping with domain and descriptors, found {found}"),
            });
            return;
        }
        let root = &self.without_name(root);
        let Some(fields) = self.fields(
            root,
            "",
            ROOT_FIELDS,
            "a mapping with domain and descriptors",
        ) else {
            return;
        };
        let domain = match fields.get("domain") {
            None => None,
            Some(node) => self.string(node, "domain").map(|d| (d, node.line)),
        };
        let domain = match domain {
            Some((d, line)) if d.is_empty() => {
                self.error(line, "domain", "config file cannot have empty domain");
                None
            }
            Some((d, line)) => {
                if let Some(first) = self.files.get(&d) {
                    if self.merge_domains {
                        Some(d)
                    } else {
                        let message = format!(
                            "duplicate domain '{d}': also in {first} (--envoy-merge-domains, \
                             [envoy] merge_domains or MERGE_DOMAIN_CONFIG=true merges one \
                             domain spread over several files or xDS resources)"
                        );
                        self.error(line, "domain", message);
                        None
                    }
                } else {
                    self.files.insert(d.clone(), self.file.clone());
                    Some(d)
                }
            }
            None => {
                if fields.get("domain").is_none() {
                    self.error(
                        root.line,
                        "domain",
                        "missing required field: config file cannot have empty domain",
                    );
                }
                None
            }
        };
        // A merged domain's file adds to the levels the earlier ones made.
        let mut top = domain
            .as_ref()
            .and_then(|d| self.out.domains.remove(d))
            .unwrap_or_default();
        let parent = format!("{}.", domain.as_deref().unwrap_or_default());
        self.descriptors(fields.get("descriptors"), "descriptors", &parent, &mut top);
        if let Some(domain) = domain {
            self.out.domains.insert(domain, top);
        }
    }
}

impl Loader {
    /// `root` without its `name` entries, each checked to be a string.
    fn without_name(&mut self, root: &Yaml) -> Yaml {
        let Value::Map(entries) = &*root.value else {
            return root.clone();
        };
        let mut kept = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            if matches!(&*key.value, Value::Scalar { text, .. } if text == IGNORED_ROOT_FIELD) {
                let _ = self.string(value, IGNORED_ROOT_FIELD);
            } else {
                kept.push((key.clone(), value.clone()));
            }
        }
        Yaml {
            line: root.line,
            value: Rc::new(Value::Map(kept)),
        }
    }
}

impl EnvoyLimits {
    /// Loads every file; `taken` are rule names already in use (the TOML
    /// config's rules) that generated rule names must avoid. Errors name
    /// each file as its path displays.
    ///
    /// # Errors
    /// Every problem in every file, file by file, in line order: an
    /// unreadable file is one error.
    pub fn load(files: &[PathBuf], taken: &[&str]) -> Result<Self, ConfigErrors> {
        Self::load_with(files, taken, false)
    }

    /// [`EnvoyLimits::load`], with `merge_domains`: a domain spread over
    /// several files is one domain (the reference's `MERGE_DOMAIN_CONFIG`),
    /// a descriptor key defined in two of them an error naming both.
    ///
    /// # Errors
    /// As [`EnvoyLimits::load`].
    pub fn load_with(
        files: &[PathBuf],
        taken: &[&str],
        merge_domains: bool,
    ) -> Result<Self, ConfigErrors> {
        let mut loader = Loader::new(taken, merge_domains);
        for path in files {
            let file = path.display().to_string();
            match crate::config::file::read(path) {
                Err(e) => loader.file_error(&file, None, e),
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => loader.file(&file, &text),
                    Err(e) => {
                        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
                        loader.file_error(
                            &file,
                            Some(line),
                            "the file is not valid UTF-8".to_owned(),
                        );
                    }
                },
            }
        }
        loader.finish()
    }

    /// Same as [`EnvoyLimits::load`] from in-memory `(file name, text)`
    /// pairs.
    ///
    /// # Errors
    /// Every problem in every source, source by source, in line order.
    pub fn parse(sources: &[(String, String)], taken: &[&str]) -> Result<Self, ConfigErrors> {
        Self::parse_with(sources, taken, false)
    }

    /// [`EnvoyLimits::parse`], with `merge_domains` as for
    /// [`EnvoyLimits::load_with`].
    ///
    /// # Errors
    /// As [`EnvoyLimits::parse`].
    pub fn parse_with(
        sources: &[(String, String)],
        taken: &[&str],
        merge_domains: bool,
    ) -> Result<Self, ConfigErrors> {
        let mut loader = Loader::new(taken, merge_domains);
        for (file, text) in sources {
            loader.file(file, text);
        }
        loader.finish()
    }
}
