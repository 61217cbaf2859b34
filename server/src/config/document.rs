//! What every configuration source gives the loader: a [`Document`],
//! parsed and not yet checked, from a YAML file's text or from a [`Tree`]
//! of typed values (an xDS resource, translated).

use super::{Config, ConfigError, yaml};

/// One configuration document, parsed and not yet checked, with the name
/// of where it came from (a file's path, or an xDS resource): what every
/// configuration source gives [`Config::from_documents`].
#[derive(Debug, Clone)]
pub struct Document {
    /// Where it came from ([`name`](Self::name)).
    pub(super) name: String,
    /// Its YAML tree, not yet checked.
    pub(super) doc: yaml::Document,
}

impl Document {
    /// Parses a YAML file's `text` (its first document), `name` being its
    /// path: a file past [`Config::MAX_FILE_BYTES`], nested past
    /// [`Config::MAX_DEPTH`], whose aliases copy past
    /// [`Config::ALIAS_ALLOWANCE`] or that is not YAML is rejected, naming
    /// it and the line.
    pub fn parse(name: impl Into<String>, text: &str) -> Result<Document, ConfigError> {
        let name = name.into();
        let doc = parse_file(&name, text)?;
        Ok(Document { name, doc })
    }

    /// The document of a [`Tree`], as a source that is not a file gives
    /// it, `name` being where it came from (an xDS resource's name); its
    /// errors have no line. A tree nested past [`Config::MAX_DEPTH`] is
    /// rejected.
    pub fn from_tree(name: impl Into<String>, tree: &Tree) -> Result<Document, ConfigError> {
        let name = name.into();
        let root = tree.to_node(0).ok_or_else(|| ConfigError {
            file: name.clone(),
            path: String::new(),
            line: 0,
            message: format!(
                "nested more than {} lists and mappings deep",
                Config::MAX_DEPTH
            ),
            transient: false,
        })?;
        Ok(Document {
            name,
            doc: yaml::Document {
                root: Some(root),
                duplicates: Vec::new(),
                more_documents: false,
            },
        })
    }

    /// Where the document came from, as its errors and warnings name it.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Parses the file `name` with contents `text` (within the bounds of
/// [`Config`]), not yet checked.
fn parse_file(name: &str, text: &str) -> Result<yaml::Document, ConfigError> {
    let err = |line: usize, message: String| ConfigError {
        file: name.to_owned(),
        path: String::new(),
        line,
        message,
        transient: false,
    };
    if text.len() > Config::MAX_FILE_BYTES {
        return Err(err(
            0,
            format!(
                "{} bytes: a configuration file may hold at most {} MiB",
                text.len(),
                Config::MAX_FILE_BYTES >> 20
            ),
        ));
    }
    yaml::parse(text, yaml::Limits::DEFAULT).map_err(|e| {
        if e.bound {
            err(e.line, e.message)
        } else {
            err(e.line, format!("not valid YAML: {}", e.message))
        }
    })
}

/// A document's values with their types, as a source that is not a YAML
/// file gives them (an xDS resource, translated): a file's mapping with
/// `domain` and `descriptors`, and so on down, with the same keys.
#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    /// No value (an absent field).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A number with a fraction (only meaningful in `metadata`: rejected
    /// elsewhere, as in a file).
    Float(f64),
    /// A string, whatever it holds (`"yes"` is no boolean, `"10"` no
    /// number).
    Str(String),
    /// A list.
    List(Vec<Tree>),
    /// A mapping, its entries in order.
    Map(Vec<(String, Tree)>),
}

impl Tree {
    /// The YAML node this tree reads as, `depth` lists and mappings deep;
    /// `None` past [`Config::MAX_DEPTH`].
    fn to_node(&self, depth: usize) -> Option<yaml::Node> {
        let plain = |text: String| yaml::Kind::Scalar {
            text,
            plain: true,
            str_tag: false,
        };
        let kind = match self {
            Tree::Null => plain("null".to_owned()),
            Tree::Bool(b) => plain(b.to_string()),
            Tree::Int(n) => plain(n.to_string()),
            Tree::Float(f) if f.is_nan() => plain(".nan".to_owned()),
            Tree::Float(f) if f.is_infinite() => {
                plain(if *f > 0.0 { ".inf" } else { "-.inf" }.to_owned())
            }
            // (with a fraction or an exponent, so that it reads as a float)
            Tree::Float(f) => plain(format!("{f:e}")),
            Tree::Str(s) => yaml::Kind::Scalar {
                text: s.clone(),
                plain: false,
                str_tag: false,
            },
            Tree::List(_) | Tree::Map(_) if depth >= Config::MAX_DEPTH => return None,
            Tree::List(items) => yaml::Kind::Seq(
                items
                    .iter()
                    .map(|t| t.to_node(depth + 1))
                    .collect::<Option<_>>()?,
            ),
            Tree::Map(entries) => yaml::Kind::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = yaml::Node {
                            line: 0,
                            kind: yaml::Kind::Scalar {
                                text: k.clone(),
                                plain: false,
                                str_tag: false,
                            },
                        };
                        Some((key, v.to_node(depth + 1)?))
                    })
                    .collect::<Option<_>>()?,
            ),
        };
        Some(yaml::Node { line: 0, kind })
    }
}
