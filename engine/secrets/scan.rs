//! Credentials refused before they land: what a run would put on a branch
//! or in the chart (its added lines, its notes, its follow-ups) is scanned
//! for credentials before anything is committed, pushed or posted.
//!
//! The patterns are gitleaks' maintained rule set (`gitleaks.toml`, see
//! SOURCE.md): each rule's regular expression, keywords (a cheap
//! prefilter), secret group, entropy threshold and allowlists, applied as
//! gitleaks applies them. Two differences, both because the author here is
//! a hostile agent: path allowlists are not honoured (a token in
//! `node_modules/` or a lock file is still a token), and no inline
//! `gitleaks:allow` exists. Beside the rules, the exact values of the
//! credentials ward holds (the model key, the forge token, the agent's
//! placeholder key) are found wherever they appear, encoded as they were.
//!
//! A finding names the file, the line and the kind of credential, never
//! the value.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::{Regex, RegexBuilder};
use serde::Deserialize;

/// The rule set, as shipped.
const GITLEAKS: &str = include_str!("gitleaks.toml");

/// A credential found: where, and what kind (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file (or `the notes`) it is in.
    pub path: String,
    /// Its line, from 1.
    pub line: usize,
    /// The rule's id (`github-pat`), or `ward-known-credential`.
    pub rule: String,
    /// What the rule says it is.
    pub kind: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {} ({}: {})", self.path, self.line, self.rule, self.kind)
    }
}

/// The text to scan: one file's added lines (their numbers in the new
/// file), or a whole text.
pub struct Text<'a> {
    pub path: &'a str,
    pub lines: Vec<(usize, &'a str)>,
}

impl<'a> Text<'a> {
    /// A whole text (the notes): every line, numbered from 1.
    pub fn whole(path: &'a str, text: &'a str) -> Self {
        Self { path, lines: text.lines().enumerate().map(|(i, l)| (i + 1, l)).collect() }
    }
}

/// The rules and the known values.
pub struct Scanner {
    rules: &'static Rules,
    /// The values ward holds, by the name they are known by.
    known: Vec<(String, String)>,
}

/// The shortest value treated as a known credential: shorter ones would
/// match ordinary text.
const KNOWN_MIN_LEN: usize = 12;

impl Scanner {
    /// gitleaks' rules, and the credentials `known` (name, value): the ones
    /// ward holds and hands the agent as placeholders. Values shorter than
    /// 12 characters are not looked for.
    pub fn new(known: impl IntoIterator<Item = (String, String)>) -> Result<Self, RuleSetError> {
        let rules = rules()?;
        let known = known.into_iter().filter(|(_, v)| v.trim().len() >= KNOWN_MIN_LEN).collect();
        Ok(Self { rules, known })
    }

    /// Every line of `texts` that holds a credential, in order, each named
    /// once by its most specific rule (a value ward holds, then a
    /// provider's format, then the generic assignment).
    pub fn scan<'a>(&self, texts: impl IntoIterator<Item = Text<'a>>) -> Vec<Finding> {
        let mut found = Vec::new();
        for text in texts {
            let mut here = Vec::new();
            self.scan_one(&text, &mut here);
            let rank = |f: &Finding| match f.rule.as_str() {
                "ward-known-credential" => 0,
                id if id.starts_with("generic") => 2,
                _ => 1,
            };
            here.sort_by_key(|f| (f.line, rank(f)));
            here.dedup_by_key(|f| f.line);
            found.extend(here);
        }
        found
    }

    fn scan_one(&self, text: &Text<'_>, found: &mut Vec<Finding>) {
        // The added lines as one text (a private key spans lines), and
        // where each line starts in it.
        let mut joined = String::new();
        let mut starts = Vec::with_capacity(text.lines.len());
        for (number, line) in &text.lines {
            starts.push((joined.len(), *number));
            joined.push_str(line);
            joined.push('\n');
        }
        let line_at = |offset: usize| {
            let i = starts.partition_point(|(start, _)| *start <= offset).saturating_sub(1);
            starts.get(i).map_or(1, |(_, n)| *n)
        };
        let line_text = |offset: usize| {
            let i = starts.partition_point(|(start, _)| *start <= offset).saturating_sub(1);
            text.lines.get(i).map_or("", |(_, l)| *l)
        };
        for (name, value) in &self.known {
            for (offset, _) in joined.match_indices(value.as_str()) {
                let kind = format!("the value of `{name}`, a credential ward holds");
                found.push(Finding {
                    path: text.path.to_string(),
                    line: line_at(offset),
                    rule: "ward-known-credential".into(),
                    kind,
                });
            }
        }
        let lower = joined.to_lowercase();
        for rule in &self.rules.rules {
            if rule.path.as_ref().is_some_and(|p| !p.is_match(text.path)) {
                continue;
            }
            if rule.pattern.is_none() {
                // A rule on the file alone (a PKCS#12 keystore).
                found.push(rule.finding(text.path, text.lines.first().map_or(1, |(n, _)| *n)));
                continue;
            }
            if !rule.keywords.is_empty() && !rule.keywords.iter().any(|k| lower.contains(k.as_str())) {
                continue;
            }
            let Some(regex) = rule.regex() else { continue };
            for captures in regex.captures_iter(&joined) {
                let Some(whole) = captures.get(0) else { continue };
                let group = match rule.secret_group {
                    Some(group) => captures.get(group).map(|m| m.as_str()),
                    None => captures.iter().skip(1).flatten().map(|m| m.as_str()).find(|s| !s.is_empty()),
                };
                let secret = group.filter(|s| !s.is_empty()).unwrap_or(whole.as_str());
                if rule.entropy.is_some_and(|min| entropy(secret) <= min) {
                    continue;
                }
                let line = line_text(whole.start());
                let allowed = |a: &Allow| a.allows(secret, whole.as_str(), line);
                if self.rules.global.iter().any(allowed) || rule.allowlists.iter().any(allowed) {
                    continue;
                }
                found.push(rule.finding(text.path, line_at(whole.start())));
            }
        }
    }
}

/// Shannon entropy in bits per character, as gitleaks computes it.
pub fn entropy(s: &str) -> f64 {
    let mut counts: HashMap<char, usize> = HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_default() += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts.values().map(|&c| c as f64 / n as f64).map(|p| -p * p.log2()).sum()
}

struct Rules {
    rules: Vec<Rule>,
    global: Vec<Allow>,
}

struct Rule {
    id: String,
    description: String,
    /// Compiled the first time its keywords are in a text: a few rules
    /// take most of the set's compile time (`[\w-]{50,1000}`).
    pattern: Option<String>,
    regex: OnceLock<Option<Regex>>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    keywords: Vec<String>,
    path: Option<Regex>,
    allowlists: Vec<Allow>,
}

impl Rule {
    /// The rule's expression (every shipped one compiles: the tests say so).
    fn regex(&self) -> Option<&Regex> {
        let pattern = self.pattern.as_deref()?;
        let compiled = self.regex.get_or_init(|| {
            compile(pattern, &format!("rule `{}`", self.id))
                .map_err(|e| tracing::warn!(rule = %self.id, "{e}; the rule is skipped"))
                .ok()
        });
        compiled.as_ref()
    }

    fn finding(&self, path: &str, line: usize) -> Finding {
        let kind = self.description.split([',', '.']).next().unwrap_or(&self.description).trim().to_string();
        Finding { path: path.to_string(), line, rule: self.id.clone(), kind }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Secret,
    Match,
    Line,
}

/// An allowlist, without its paths and commits (see the module's docs).
struct Allow {
    target: Target,
    all: bool,
    regexes: Vec<Regex>,
    stopwords: Vec<String>,
    /// It checks paths or commits too: under `AND`, never satisfied here.
    scoped: bool,
}

impl Allow {
    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        let lower = secret.to_lowercase();
        let mut checks = Vec::new();
        if !self.regexes.is_empty() {
            checks.push(!target.is_empty() && self.regexes.iter().any(|r| r.is_match(target)));
        }
        if !self.stopwords.is_empty() {
            checks.push(self.stopwords.iter().any(|w| lower.contains(w.as_str())));
        }
        if self.all {
            !checks.is_empty() && !self.scoped && checks.iter().all(|c| *c)
        } else {
            checks.iter().any(|c| *c)
        }
    }
}

#[derive(Deserialize)]
struct RawConfig {
    allowlist: Option<RawAllow>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    id: String,
    description: String,
    regex: Option<String>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    path: Option<String>,
    #[serde(default)]
    allowlists: Vec<RawAllow>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAllow {
    regex_target: Option<String>,
    condition: Option<String>,
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    commits: Vec<String>,
}

/// Why the vendored rule set (`secrets/gitleaks.toml`) does not load: a
/// fault of ward's build, never of what is scanned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuleSetError {
    #[error("gitleaks.toml does not parse: {0}")]
    Parse(toml_edit::de::Error),
    #[error("gitleaks.toml: the {what} does not compile: {error}")]
    Regex { what: String, error: regex::Error },
    #[error("gitleaks.toml: {what} has an unknown regexTarget `{target}`")]
    Target { what: String, target: String },
}

fn compile(pattern: &str, what: &str) -> Result<Regex, RuleSetError> {
    RegexBuilder::new(&from_go(pattern))
        .size_limit(64 << 20)
        .build()
        .map_err(|error| RuleSetError::Regex { what: what.into(), error })
}

/// Go's regular expressions (RE2, gitleaks' language) take a `{` that
/// starts no repetition as a literal; Rust's wants it escaped.
fn from_go(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let (mut i, mut in_class) = (0, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(next) = chars.get(i + 1) {
                    out.push(*next);
                }
                i += 2;
                continue;
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class && !repetition(&chars[i + 1..]) => out.push('\\'),
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `n}`, `n,}` or `n,m}`: what follows a `{` that repeats.
fn repetition(rest: &[char]) -> bool {
    let digits = |s: &[char]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(rest);
    if n == 0 {
        return false;
    }
    match rest.get(n) {
        Some('}') => true,
        Some(',') => {
            let m = digits(&rest[n + 1..]);
            rest.get(n + 1 + m) == Some(&'}')
        }
        _ => false,
    }
}

impl RawAllow {
    fn compile(self, what: &str) -> Result<Allow, RuleSetError> {
        let target = match self.regex_target.as_deref() {
            None | Some("secret") => Target::Secret,
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            Some(other) => return Err(RuleSetError::Target { what: what.into(), target: other.into() }),
        };
        let regexes = self.regexes.iter().map(|r| compile(r, what)).collect::<Result<_, _>>()?;
        Ok(Allow {
            target,
            all: self.condition.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("and")),
            regexes,
            stopwords: self.stopwords.iter().map(|w| w.to_lowercase()).collect(),
            scoped: !self.paths.is_empty() || !self.commits.is_empty(),
        })
    }
}

fn load() -> Result<Rules, RuleSetError> {
    let raw: RawConfig = toml_edit::de::from_str(GITLEAKS).map_err(RuleSetError::Parse)?;
    let global = raw.allowlist.map(|a| a.compile("global allowlist")).transpose()?.into_iter().collect();
    let mut rules = Vec::with_capacity(raw.rules.len());
    for r in raw.rules {
        let what = format!("rule `{}`", r.id);
        rules.push(Rule {
            pattern: r.regex,
            regex: OnceLock::new(),
            path: r.path.as_deref().map(|p| compile(p, &what)).transpose()?,
            secret_group: r.secret_group.filter(|g| *g > 0),
            entropy: r.entropy.filter(|e| *e > 0.0),
            keywords: r.keywords.iter().map(|k| k.to_lowercase()).collect(),
            allowlists: r.allowlists.into_iter().map(|a| a.compile(&what)).collect::<Result<_, _>>()?,
            id: r.id,
            description: r.description,
        });
    }
    Ok(Rules { rules, global })
}

/// The rule set, compiled once per process.
fn rules() -> Result<&'static Rules, RuleSetError> {
    static RULES: OnceLock<Result<Rules, RuleSetError>> = OnceLock::new();
    RULES.get_or_init(load).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(path: &str, text: &str) -> Vec<Finding> {
        Scanner::new([]).unwrap().scan([Text::whole(path, text)])
    }

    #[test]
    fn every_rule_of_the_shipped_set_compiles() {
        let rules = rules().unwrap();
        assert!(rules.rules.len() > 200, "{} rules", rules.rules.len());
        for rule in &rules.rules {
            if let Some(pattern) = &rule.pattern {
                compile(pattern, &rule.id).unwrap();
            }
        }
    }

    #[test]
    fn tokens_keys_and_private_keys_are_found_by_file_and_line_never_quoted() {
        // Made up here, in the forms the providers publish.
        let pat = format!("ghp_{}", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8");
        let text = format!("import os\n\nTOKEN = \"{pat}\"\n");
        let found = scan("src/app.py", &text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].path.as_str(), found[0].line, found[0].rule.as_str()), ("src/app.py", 3, "github-pat"));
        assert!(!found[0].to_string().contains(&pat), "{}", found[0]);

        let fine = format!(
            "github_pat_11{}_{}",
            "ABCDEFGHIJ0123456789ab", "x9Y8w7V6u5T4s3R2q1P0o9N8m7L6k5J4i3H2g1F0e9D8c7B6a5Z4y3X2w1V"
        );
        assert!(scan("a.sh", &format!("export GH={fine}\n")).iter().any(|f| f.rule == "github-fine-grained-pat"));
        let aws = "AKIAZ7VRSQ5TL3KXWMPE";
        assert!(scan("cfg.ini", &format!("aws_access_key_id = {aws}\n")).iter().any(|f| f.rule == "aws-access-token"));
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDm1xWvGUmoVj3Eu5xHMXc8Gp5N2jv4Zp5w0dQx9ha3JwAAAJgx3l9Zcd5f\n-----END OPENSSH PRIVATE KEY-----\n";
        let found = scan("deploy/id_ed25519", &format!("# key\n{key}"));
        assert!(found.iter().any(|f| f.rule == "private-key" && f.line == 2), "{found:?}");
    }

    #[test]
    fn ordinary_code_and_placeholders_are_not_credentials() {
        let text = "token = os.environ[\"GITHUB_TOKEN\"]\npassword = \"${PASSWORD}\"\nkey = \"{{ secrets.KEY }}\"\n\
                    let api_key = config.api_key.clone();\nfn tokenize(s: &str) {}\n";
        assert_eq!(scan("src/lib.rs", text), vec![]);
    }

    #[test]
    fn a_high_entropy_value_assigned_is_found_a_low_one_is_not() {
        assert!(!scan("settings.py", "SECRET_KEY = \"q8Zr4vTnX2mLw9sKpB7dYcF3hJ6gRt1e\"\n").is_empty());
        assert!(scan("settings.py", "SECRET_KEY = \"aaaaaaaaaaaaaaaaaaaaaaaa\"\n").is_empty());
    }

    #[test]
    fn a_known_value_is_found_anywhere_and_named_by_its_variable() {
        let s = Scanner::new([
            ("ANTHROPIC_API_KEY".to_string(), "sk-ant-real-key-of-the-job".to_string()),
            ("SHORT".to_string(), "abc".to_string()),
        ])
        .unwrap();
        let found = s.scan([Text { path: "notes", lines: vec![(7, "the key is sk-ant-real-key-of-the-job, abc")] }]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].line, found[0].rule.as_str()), (7, "ward-known-credential"));
        assert!(found[0].kind.contains("ANTHROPIC_API_KEY"));
    }

    #[test]
    fn a_token_in_a_lock_file_or_vendored_folder_is_still_found() {
        let pat = format!("ghp_{}", "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2");
        assert_eq!(scan("node_modules/x/index.js", &format!("var t = '{pat}';\n")).len(), 1);
        assert_eq!(scan("package-lock.json", &format!("\"t\": \"{pat}\"\n")).len(), 1);
    }
}
