//! Reading configuration files and compiling them into a [`RuleSet`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ratewise::Quota;

use super::rules::{
    policy_item, Domain, Level, Limit, Node, Pattern, ReportedLimit, Rule, RuleSet,
};
use super::schema::{AlgorithmName, DescriptorSchema, FileSchema, SpecLimit};
use crate::counters::Counters;
use crate::telemetry::RuleMetrics;

/// Why a configuration could not be loaded. Each message names the file and,
/// where the YAML parser knows it, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A file is not valid YAML, has an unknown key or a bad value.
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// The parser's message, with the line and column.
        message: String,
    },
    /// A file parses but does not make sense.
    #[error("{file}: {at}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// Where in the tree (`descriptors[0].descriptors[2]`, key …).
        at: String,
        /// What is wrong.
        message: String,
    },
    /// Two files define one domain.
    #[error("domain `{domain}` is defined twice: in {first} and in {second} (to merge the files of one domain, start with --merge-domains)")]
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The first file.
        first: String,
        /// The second file.
        second: String,
    },
    /// Two files of one domain, merged ([`LoadOptions::merge_domains`]),
    /// both define a top-level descriptor.
    #[error("domain `{domain}`: the descriptor `{descriptor}` is defined in {first} and again in {second}")]
    DuplicateInMerge {
        /// The domain.
        domain: String,
        /// The descriptor: `key`, `key=value` or `key=pattern`.
        descriptor: String,
        /// A file that defined it first.
        first: String,
        /// The file that defined it again.
        second: String,
    },
    /// Two files of one domain, merged, set different failure policies.
    #[error("domain `{domain}`: {second} sets `failure_policy: {policy}`, but an earlier file of the domain ({first}) set another")]
    ConflictingFailurePolicy {
        /// The domain.
        domain: String,
        /// The policy the later file sets.
        policy: String,
        /// The earlier file.
        first: String,
        /// The later file.
        second: String,
    },
    /// A directory holds no `.yaml` or `.yml` file.
    #[error("{0}: no .yaml or .yml file to load")]
    NoFiles(PathBuf),
}

/// Settings for compiling rules.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// The most distinct descriptor values one rule keeps counters for.
    pub max_keys_per_rule: usize,
    /// Files that name the same domain add their descriptors to it
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`), instead of being an
    /// error; a top-level descriptor defined by two of them still is one.
    pub merge_domains: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_keys_per_rule: 1_000_000,
            merge_domains: false,
        }
    }
}

/// The configuration files at `path`: the file itself, or every `.yaml` /
/// `.yml` file under the directory (hidden entries skipped, as Kubernetes'
/// `..data` links), sorted.
///
/// # Errors
/// [`ConfigError::Read`] or [`ConfigError::NoFiles`].
pub fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| ConfigError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| ConfigError::Read {
                path: dir.clone(),
                source,
            })?;
            let p = entry.path();
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if hidden {
                continue;
            }
            if p.is_dir() {
                dirs.push(p);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
                files.push(p);
            }
        }
    }
    if files.is_empty() {
        return Err(ConfigError::NoFiles(path.to_path_buf()));
    }
    files.sort();
    Ok(files)
}

/// Loads and compiles the configuration at `path` (a file or a directory).
/// Rules whose path, quota and algorithm are unchanged from `previous` keep
/// its counters.
///
/// # Errors
/// Any [`ConfigError`]; nothing of `previous` is changed then.
pub fn load_path(
    path: &Path,
    previous: Option<&RuleSet>,
    options: LoadOptions,
) -> Result<RuleSet, ConfigError> {
    let mut sources = Vec::new();
    for file in config_files(path)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            path: file.clone(),
            source,
        })?;
        sources.push((file.display().to_string(), text));
    }
    compile_sources(&sources, previous, options)
}

/// Compiles configuration texts, each named by its file, into a rule set.
///
/// # Errors
/// Any [`ConfigError`].
pub fn compile_sources(
    sources: &[(String, String)],
    previous: Option<&RuleSet>,
    options: LoadOptions,
) -> Result<RuleSet, ConfigError> {
    let kept: HashMap<_, _> = previous
        .into_iter()
        .flat_map(RuleSet::rules)
        .filter_map(|r| Some((r.state_identity()?, r.counters.clone()?)))
        .collect();
    let mut set = RuleSet::default();
    let mut files_of: HashMap<String, String> = HashMap::new();
    for (file, text) in sources {
        let schema: FileSchema = serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.clone(),
            message: e.to_string(),
        })?;
        if schema.domain.is_empty() {
            return Err(ConfigError::Invalid {
                file: file.clone(),
                at: "domain".into(),
                message: "the domain is empty".into(),
            });
        }
        let earlier = files_of.get(&schema.domain).cloned();
        if let (Some(first), false) = (&earlier, options.merge_domains) {
            return Err(ConfigError::DuplicateDomain {
                domain: schema.domain,
                first: first.clone(),
                second: file.clone(),
            });
        }
        files_of.insert(schema.domain.clone(), file.clone());
        let mut compiler = Compiler {
            file,
            domain: Arc::from(schema.domain.as_str()),
            kept: &kept,
            options,
            rules: Vec::new(),
        };
        let root = compiler.level(&schema.descriptors, "descriptors", &schema.domain, false)?;
        let rules = compiler.rules;
        let failure = schema.failure_policy;
        match (earlier, set.domains.get_mut(schema.domain.as_str())) {
            (Some(first), Some(domain)) => {
                merge_domain(domain, root, rules, failure, &schema.domain, &first, file)?;
            }
            _ => {
                set.domains.insert(
                    schema.domain.into_boxed_str(),
                    Domain {
                        root,
                        rules,
                        failure,
                    },
                );
            }
        }
        set.sources.push(file.clone());
    }
    Ok(set)
}

/// Adds a later file's descriptors of `name` to `domain`, as
/// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG` does: its top-level
/// descriptors join the domain's, and one the domain already has is an
/// error (naming `first`, the domain's earlier file, and `file`).
fn merge_domain(
    domain: &mut Domain,
    more: Level,
    rules: Vec<Arc<Rule>>,
    failure: Option<super::FailureMode>,
    name: &str,
    first: &str,
    file: &str,
) -> Result<(), ConfigError> {
    let duplicate = |descriptor: String| ConfigError::DuplicateInMerge {
        domain: name.to_string(),
        descriptor,
        first: first.to_string(),
        second: file.to_string(),
    };
    match (domain.failure, failure) {
        (Some(a), Some(b)) if a != b => {
            return Err(ConfigError::ConflictingFailurePolicy {
                domain: name.to_string(),
                policy: b.to_string(),
                first: first.to_string(),
                second: file.to_string(),
            })
        }
        (None, Some(b)) => domain.failure = Some(b),
        _ => {}
    }
    let root = &mut domain.root;
    for (key, values) in more.exact {
        let into = root.exact.entry(key.clone()).or_default();
        for (value, node) in values {
            if into.contains_key(&value) {
                return Err(duplicate(format!("{key}={value}")));
            }
            into.insert(value, node);
        }
    }
    for (key, pattern, node) in more.wildcard {
        if root
            .wildcard
            .iter()
            .any(|(k, p, _)| *k == key && *p == pattern)
        {
            return Err(duplicate(format!("{key}={}", pattern.text())));
        }
        root.wildcard.push((key, pattern, node));
    }
    for (key, node) in more.any {
        if root.any.contains_key(&key) {
            return Err(duplicate(key.to_string()));
        }
        root.any.insert(key, node);
    }
    domain.rules.extend(rules);
    Ok(())
}

struct Compiler<'a> {
    file: &'a str,
    domain: Arc<str>,
    kept: &'a HashMap<(Arc<str>, Quota, AlgorithmName), Arc<Counters>>,
    options: LoadOptions,
    rules: Vec<Arc<Rule>>,
}

impl Compiler<'_> {
    fn invalid(&self, at: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_string(),
            at: at.to_string(),
            message: message.into(),
        }
    }

    fn level(
        &mut self,
        nodes: &[DescriptorSchema],
        at: &str,
        path: &str,
        charge_parents: bool,
    ) -> Result<Level, ConfigError> {
        let mut level = Level::default();
        for (i, d) in nodes.iter().enumerate() {
            let here = format!("{at}[{i}] (key `{}`)", d.key);
            if d.key.is_empty() {
                return Err(self.invalid(&here, "`key` is empty"));
            }
            let segment = match &d.value {
                Some(v) => format!("{}={v}", d.key),
                None => d.key.clone(),
            };
            let node_path = format!("{path}.{segment}");
            let pattern = d.value.as_deref().and_then(Pattern::new);
            if d.share_threshold && pattern.is_none() {
                return Err(self.invalid(
                    &here,
                    "`share_threshold` needs a wildcard `value` (one containing `*`)",
                ));
            }
            let charge = d.charge_parents.unwrap_or(charge_parents);
            let children = self.level(
                &d.descriptors,
                &format!("{here}.descriptors"),
                &node_path,
                charge,
            )?;
            let rule = match &d.rate_limit {
                Some(spec) => Some(self.rule(d, spec, &node_path, &here)?),
                None => None,
            };
            let node = Node {
                rule,
                charge_parents: charge,
                shared_value: d
                    .share_threshold
                    .then(|| d.value.clone().unwrap_or_default().into_boxed_str()),
                children,
            };
            let duplicate = match (&d.value, pattern) {
                (Some(_), Some(p)) => {
                    let dup = level
                        .wildcard
                        .iter()
                        .any(|(k, q, _)| **k == *d.key && *q == p);
                    level.wildcard.push((d.key.as_str().into(), p, node));
                    dup
                }
                (Some(v), None) => level
                    .exact
                    .entry(d.key.as_str().into())
                    .or_default()
                    .insert(v.as_str().into(), node)
                    .is_some(),
                (None, _) => level.any.insert(d.key.as_str().into(), node).is_some(),
            };
            if duplicate {
                return Err(self.invalid(&here, format!("`{segment}` appears twice at this level")));
            }
        }
        Ok(level)
    }

    fn rule(
        &mut self,
        d: &DescriptorSchema,
        spec: &super::schema::RateLimitSpec,
        node_path: &str,
        here: &str,
    ) -> Result<Arc<Rule>, ConfigError> {
        let path: Arc<str> = Arc::from(node_path);
        let name: Arc<str> = match &spec.name {
            Some(n) if n.is_empty() => return Err(self.invalid(here, "`name` is empty")),
            Some(n) => Arc::from(n.as_str()),
            None => Arc::from(&node_path[self.domain.len() + 1..]),
        };
        let limit = match spec.limit {
            SpecLimit::Unlimited => Limit::Unlimited,
            SpecLimit::PerPeriod {
                count,
                period,
                unit,
                burst,
                algorithm,
            } => {
                let reported = match unit {
                    Some(unit) => ReportedLimit {
                        requests_per_unit: u32::try_from(count).unwrap_or(u32::MAX),
                        unit,
                    },
                    None => ReportedLimit::nearest(count, period),
                };
                if count == 0 {
                    Limit::Blocked { reported }
                } else {
                    let quota = Quota::per(count, period)
                        .and_then(|q| match burst {
                            Some(b) => q.with_burst(b),
                            None => Ok(q),
                        })
                        .map_err(|e| self.invalid(here, format!("rate_limit: {e}")))?;
                    Limit::Limited {
                        quota,
                        algorithm,
                        reported,
                    }
                }
            }
        };
        let counters = match &limit {
            Limit::Limited {
                quota, algorithm, ..
            } => Some(
                self.kept
                    .get(&(Arc::clone(&path), *quota, *algorithm))
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(Counters::new(
                            *quota,
                            *algorithm,
                            self.options.max_keys_per_rule,
                        ))
                    }),
            ),
            _ => None,
        };
        let rule = Arc::new(Rule {
            metrics: RuleMetrics::new(&self.domain, &name),
            policy_item: policy_item(&name, &limit),
            path,
            name,
            domain: Arc::clone(&self.domain),
            limit,
            shadow: d.shadow_mode,
            quota: d.quota_mode,
            replaces: spec
                .replaces
                .iter()
                .map(|r| Arc::from(r.as_str()))
                .collect(),
            counters,
        });
        self.rules.push(Arc::clone(&rule));
        Ok(rule)
    }
}
