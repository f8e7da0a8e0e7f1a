//! Finding the checkable claims in a note. Pure: text in, claims out.
//!
//! A claim is something a colleague could verify in the repository:
//!
//! - a file or folder path: `engine/chart.rs`, `Makefile`, `web/app.mjs`,
//!   `engine/forge/`. A name without a slash counts only in code formatting
//!   (`` `Cargo.toml` ``) or as a markdown link's target, so prose such as
//!   "Node.js" or "e.g." is not one;
//! - a line reference, in the forms compilers, grep and GitHub print:
//!   `path:10`, `path:10:5`, `path:10-20`, `path#L10`, `path#L10-L20`
//!   (also `#L10C5`);
//! - a test named in code formatting under a heading about tests
//!   (`appends_once`, `chart::tests::appends_once`, `TestParse`,
//!   `tests/test_api.py::test_login`);
//! - a precedent id (`P-0007`).
//!
//! Not claims: URLs (with or without a scheme), versions (`1.2.3`), times
//! (`12:30`), globs, module paths (`std::fs`), method calls
//! (`res.json()`), and everything inside a URL.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    Path,
    LineRef,
    Test,
    Precedent,
}

/// One checkable statement found in the notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub kind: ClaimKind,
    /// As written (`engine/chart.rs:40`, `P-0003`, `sweep_revives_once`).
    pub text: String,
    /// The path part, for paths and line references (a folder ends with
    /// `/`), and the file of a test named with its file (`t.py::test_a`).
    pub path: Option<String>,
    /// First and last line, 1-based, of a line reference.
    pub lines: Option<(usize, usize)>,
    /// The column of the first line (`path:10:5`, `path#L10C5`).
    pub column: Option<usize>,
    /// The note says the file is new (create/add/new on the same line).
    pub planned_new: bool,
    /// The note says the file is gone (delete/remove/rename/move on the
    /// same line): it may be missing now, and its lines may be gone.
    pub planned_gone: bool,
}

impl Claim {
    /// The identifier a test claim is searched by: the last segment of
    /// `a::b::name`, `Class.name` or `file.py::Class::name`, the part
    /// before the `/` of a Go subtest (`TestParse/empty`).
    pub fn test_identifier(&self) -> &str {
        let text = self.text.rsplit("::").next().unwrap_or(&self.text);
        let text = text.split('/').next().unwrap_or(text);
        text.rsplit('.').next().unwrap_or(text)
    }
}

/// File extensions that make a token a path: source, build, config, docs,
/// data and the binary assets repositories commonly keep (often in LFS).
/// Left out on purpose, as they are far more often an attribute than a
/// file in notes: `env` (`process.env`), `log` (`console.log`), `fs`
/// (`std.fs`), `db`, `text`, `config`, `model`, `key`, `org`, one-letter
/// ones but `c`, `h`, `m`, `s`, `t`, and build outputs (`o`, `so`, `exe`).
#[rustfmt::skip]
const EXTENSIONS: &[&str] = &[
    // Rust, C family, JVM, .NET, Apple
    "rs", "c", "h", "cc", "cpp", "cxx", "c++", "hh", "hpp", "hxx", "inl", "ipp", "m", "mm", "java", "kt", "kts",
    "scala", "groovy", "gradle", "clj", "cljs", "cljc", "edn", "cs", "csx", "fsi", "fsx", "vb", "swift",
    // scripting
    "py", "pyi", "pyx", "pxd", "ipynb", "rb", "rake", "gemspec", "erb", "php", "phtml", "pl", "pm", "t", "lua", "rmd",
    "jl", "tcl", "sh", "bash", "zsh", "fish", "ksh", "ps1", "psm1", "bat", "awk", "sed",
    // JavaScript and the web
    "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "vue", "svelte", "astro", "html", "htm", "xhtml", "css",
    "scss", "sass", "less", "styl", "hbs", "handlebars", "mustache", "ejs", "pug", "njk", "jinja", "j2", "liquid",
    "wasm", "wat",
    // other languages
    "go", "dart", "ex", "exs", "erl", "hrl", "hs", "lhs", "elm", "ml", "mli", "rei", "nim", "zig", "sv", "svh", "vhd",
    "vhdl", "sol", "asm", "s", "f90", "f95", "for", "cob", "ada", "adb", "ads", "pas", "cr", "purs", "rkt", "scm",
    "lisp", "vim", "gd", "glsl", "hlsl", "wgsl", "metal", "cu", "cuh", "proto", "thrift", "avsc", "fbs", "capnp",
    "graphql", "gql", "prisma", "sql", "psql", "cql",
    // build, packaging, CI, config
    "toml", "yml", "yaml", "json", "jsonc", "json5", "jsonl", "ndjson", "xml", "xsd", "xsl", "plist", "ini", "cfg",
    "conf", "properties", "lock", "mk", "make", "cmake", "bzl", "bazel", "nix", "tf", "tfvars", "hcl", "nomad",
    "dockerfile", "containerfile", "desktop", "sln", "csproj", "fsproj", "vcxproj", "pbxproj", "xcconfig",
    "entitlements", "storyboard", "xib", "qrc", "mod", "sum", "cabal", "opam", "nuspec", "rockspec", "podspec", "patch",
    "diff", "editorconfig",
    // docs and data
    "md", "mdx", "markdown", "rst", "adoc", "asciidoc", "txt", "tex", "bib", "sty", "cls", "csv", "tsv", "psv",
    "parquet", "avro", "npy", "npz", "h5", "hdf5", "pkl", "pickle", "sqlite", "sqlite3", "pem", "crt", "asc", "gpg",
    "snap", "golden", "tmpl", "tpl", "in", "po", "pot", "mo", "strings", "xliff", "resx", "arb",
    // binary assets
    "png", "jpg", "jpeg", "gif", "webp", "avif", "bmp", "ico", "icns", "svg", "tif", "tiff", "psd", "pdf", "mp3", "mp4",
    "m4a", "wav", "ogg", "flac", "webm", "mov", "avi", "mkv", "ttf", "otf", "woff", "woff2", "eot", "zip", "gz", "tgz",
    "bz2", "xz", "zst", "7z", "tar", "jar", "war", "aar", "apk", "ipa", "dmg", "deb", "rpm", "bin", "dat", "onnx", "pt",
    "pth", "pb", "tflite", "ckpt", "safetensors", "gguf", "blend", "fbx", "gltf", "glb", "stl", "ply", "usd", "usdz",
];

/// Names of dotfiles (`.gitignore`, `.env`, `.env.example`); `.rs` alone
/// is an extension, not a file.
#[rustfmt::skip]
const DOTFILES: &[&str] = &[
    "gitignore", "gitattributes", "gitmodules", "gitkeep", "mailmap", "dockerignore", "npmrc", "nvmrc", "yarnrc",
    "prettierrc", "prettierignore", "eslintrc", "eslintignore", "babelrc", "browserslistrc", "stylelintrc", "flake8",
    "pylintrc", "coveragerc", "clang-format", "clang-tidy", "envrc", "tool-versions", "ruby-version", "python-version",
    "node-version", "editorconfig", "env", "bashrc", "zshrc", "profile", "vimrc", "htaccess", "gitlab-ci",
    "pre-commit-config", "golangci", "rustfmt", "clippy", "cargo", "github", "vscode", "devcontainer",
];

/// File names without an extension that are still files (also with a
/// suffix: `Dockerfile.dev`). README, LICENSE and CHANGELOG are left out:
/// notes say "the README" of `README.md`.
#[rustfmt::skip]
const NAMES: &[&str] = &[
    "Makefile", "makefile", "GNUmakefile", "Dockerfile", "Containerfile", "Jenkinsfile", "Vagrantfile", "Rakefile",
    "Gemfile", "Podfile", "Procfile", "Brewfile", "Justfile", "justfile", "Snakefile", "Caddyfile", "Earthfile",
    "Tiltfile", "Pipfile", "Cartfile", "Guardfile", "Fastfile", "Appfile", "Dangerfile", "Berksfile", "Capfile",
    "Thorfile", "Taskfile", "Buildfile", "CODEOWNERS", "OWNERS", "BUILD", "WORKSPACE", "MODULE",
];

/// `Node.js` and friends: product names, not files, unless a real path
/// leads to them (`src/chart.js`).
#[rustfmt::skip]
const PRODUCTS: &[&str] = &[
    "node", "next", "nuxt", "vue", "react", "three", "d3", "chart", "express", "ember", "backbone", "angular", "moment",
    "p5", "pdf", "video", "alpine", "solid", "preact", "deno", "bun", "nest", "knockout", "underscore", "socket",
    "anime", "paper", "fabric", "matter", "brain", "ml5", "tensorflow", "tf", "phaser", "pixi", "babylon",
];

/// Objects whose attribute looks like a file (`request.json`, `self.h`).
#[rustfmt::skip]
const OBJECTS: &[&str] = &[
    "request", "response", "req", "res", "resp", "self", "this", "ctx", "obj", "err", "event", "evt", "msg", "e", "r",
    "x", "t",
];

/// Host names in a path written without its scheme (`github.com/o/r/x.rs`).
#[rustfmt::skip]
const HOST_SUFFIXES: &[&str] = &[
    "com", "org", "net", "io", "dev", "rs", "app", "co", "ai", "gov", "edu", "uk", "de", "fr", "me", "sh", "so", "xyz",
    "info", "cloud", "page", "site", "tech", "ly", "gg", "to", "eu", "us", "ca", "jp", "cn", "ru", "in", "localhost",
];

static LINE_SUFFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?P<path>[^:#]+?)(?::(?P<l1>\d+)(?::(?P<c1>\d+))?(?:[-–](?P<l2>\d+)(?::\d+)?)?|#L(?P<h1>\d+)(?:C(?P<hc>\d+))?(?:[-–]L?(?P<h2>\d+)(?:C\d+)?)?)?$",
    )
    .expect("line suffix regex is valid")
});

static PRECEDENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bP-\d{4}\b").expect("precedent regex is valid"));

static TEST_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*(?:/[A-Za-z0-9_\-]+)*$")
        .expect("test regex is valid")
});

static LINK_TARGET: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)"#).expect("link regex is valid"));

/// A candidate token on a line.
#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    text: &'a str,
    /// The whole of a code span or a markdown link target: a name without
    /// a slash may be a file.
    deliberate: bool,
}

/// A path as a claim would hold it, or `None` when `token` is not one.
fn parse_path(token: &str, deliberate: bool) -> Option<String> {
    let mut p = token;
    if p.is_empty()
        || p.contains("://")
        || p.starts_with("www.")
        || p.contains(['@', '\\', '*', '?', '$', '%', '~', '!', '&', '^', '`', '|', '(', ')', '{', '}'])
    {
        return None;
    }
    // `./x` and `../x` are relative to a folder the note does not name:
    // kept as written, checked as the tail of a tracked path.
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let folder = p.ends_with('/');
    let trimmed = p.trim_end_matches('/');
    let relative = trimmed.trim_start_matches("../");
    let parts: Vec<&str> = relative.trim_start_matches('/').split('/').collect();
    if parts.iter().any(|c| c.is_empty() || *c == "." || *c == "..") {
        return None;
    }
    if parts.iter().any(|c| !c.chars().all(|ch| ch.is_alphanumeric() || "._-+[]".contains(ch))) {
        return None;
    }
    // `./greet.sh` is a path as much as `bin/greet.sh`.
    let has_slash = token.trim_end_matches('/').contains('/');
    // `github.com/o/r/blob/x.rs`, `docs.rs/regex`: a host, not a folder.
    if parts.len() > 1 && !trimmed.starts_with(['/', '.']) && is_host(parts[0]) {
        return None;
    }
    if folder {
        // Folders only in code formatting: "and/or/" is prose.
        return (deliberate && parts.iter().any(|c| c.chars().any(char::is_alphabetic))).then(|| format!("{trimmed}/"));
    }
    if !(has_slash || deliberate) {
        return None;
    }
    let name = parts.last()?;
    let slug = parts.len() == 2 && !deliberate;
    is_file_name(name, has_slash, slug).then(|| trimmed.to_string())
}

fn is_host(first: &str) -> bool {
    first.contains('.')
        && !first.starts_with('.')
        && first.rsplit('.').next().is_some_and(|tld| HOST_SUFFIXES.contains(&tld.to_ascii_lowercase().as_str()))
}

/// `slug`: one folder before the name, as in `vercel/next.js` (a repository).
fn is_file_name(name: &str, has_slash: bool, slug: bool) -> bool {
    if let Some(dotted) = name.strip_prefix('.') {
        let first = dotted.split('.').next().unwrap_or(dotted).to_ascii_lowercase();
        if DOTFILES.contains(&first.as_str()) {
            return true;
        }
    }
    if NAMES.contains(&name.split('.').next().unwrap_or(name)) {
        return true;
    }
    let Some((stem, ext)) = name.rsplit_once('.') else { return false };
    let ext = ext.to_ascii_lowercase();
    // A stem needs a letter: `1.2.3` or `3.5` is a version, `.rs` an extension.
    if !EXTENSIONS.contains(&ext.as_str()) || !stem.chars().any(char::is_alphabetic) {
        return false;
    }
    let lower = stem.to_ascii_lowercase();
    let upper_start = stem.starts_with(|c: char| c.is_uppercase());
    if PRODUCTS.contains(&lower.as_str()) && ext == "js" && (!has_slash || upper_start || slug) {
        return false;
    }
    has_slash || !(OBJECTS.contains(&stem) || name == "docs.rs")
}

/// A test name as notes write them: identifiers joined by `::` or `.`,
/// with enough shape to be a test and not a command (`pytest`, `cargo`)
/// or a constant (`RUST_LOG`).
fn is_test_name(token: &str) -> bool {
    if token.len() <= 3 || !TEST_NAME.is_match(token) {
        return false;
    }
    let ident = token.split('/').next().unwrap_or(token);
    let last = ident.rsplit("::").next().unwrap_or(ident).rsplit('.').next().unwrap_or(ident);
    if last.len() <= 3 || last.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
        return false;
    }
    let camel = last.as_bytes().windows(2).any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    last.contains('_') || camel
}

fn line_has_word(lower: &str, words: &[&str]) -> bool {
    lower.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| words.contains(&t))
}

/// The tokens of one line: code spans, link targets, then words.
fn tokens(line: &str, in_fence: bool) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    if !in_fence {
        for span in line.split('`').skip(1).step_by(2) {
            let span = span.trim();
            if !span.is_empty() && !span.contains(char::is_whitespace) {
                out.push(Token { text: span, deliberate: true });
            }
        }
        for c in LINK_TARGET.captures_iter(line) {
            out.push(Token { text: c.get(1).map_or("", |m| m.as_str()), deliberate: true });
        }
    }
    // A diff's `a/` and `b/` are not folders.
    let diff_header = ["--- a/", "+++ b/", "diff --git "].iter().any(|m| line.trim_start().starts_with(m));
    for word in line.split(|c: char| c.is_whitespace() || "`'\"()[]{}<>,;|=".contains(c)) {
        let mut word = word.trim_matches('*').trim_end_matches(['.', ':', '!', '?', '*']);
        // `_emphasis_`, but not `__tests__/a.js` or `__init__.py`.
        if let Some(inner) = word.strip_prefix('_').and_then(|w| w.strip_suffix('_'))
            && !word.starts_with("__")
        {
            word = inner;
        }
        if diff_header {
            word = word.strip_prefix("a/").or_else(|| word.strip_prefix("b/")).unwrap_or(word);
        }
        if !word.is_empty() {
            out.push(Token { text: word, deliberate: false });
        }
    }
    out
}

/// Finds the checkable claims in a note body.
pub fn extract_claims(text: &str) -> Vec<Claim> {
    let mut out: Vec<Claim> = Vec::new();
    let mut seen = HashSet::new();
    let mut in_tests = false;
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed.chars().take_while(|c| *c == '`' || *c == '~').collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap_or('`')) {
            match &fence {
                Some(open) if marker.starts_with(open.as_str()) && trimmed[marker.len()..].trim().is_empty() => {
                    fence = None;
                    continue;
                }
                None => {
                    fence = Some(marker);
                    continue;
                }
                Some(_) => {}
            }
        }
        let in_fence = fence.is_some();
        if !in_fence && trimmed.starts_with('#') {
            let heading = trimmed.trim_start_matches('#');
            if heading.starts_with(' ') || heading.is_empty() {
                in_tests = line_has_word(&heading.to_ascii_lowercase(), &["test", "tests", "testing"]);
                continue;
            }
        }
        let lower = line.to_ascii_lowercase();
        let planned_new = line_has_word(&lower, &["new", "create", "creates", "created", "add", "adds", "added"]);
        let moved = line_has_word(&lower, &["rename", "renames", "renamed", "move", "moves", "moved"]);
        let planned_gone = moved
            || line_has_word(
                &lower,
                &["delete", "deletes", "deleted", "remove", "removes", "removed", "drop", "drops", "dropped"],
            );
        let mut push = |claim: Claim| {
            if seen.insert((claim.kind, claim.text.clone())) {
                out.push(claim);
            }
        };
        for token in tokens(line, in_fence) {
            if let Some(claim) = path_claim(token) {
                push(Claim { planned_new: planned_new || moved, planned_gone, ..claim });
                continue;
            }
            if in_tests
                && token.deliberate
                && !in_fence
                && let Some(claim) = test_claim(token.text)
            {
                push(Claim { planned_new, planned_gone, ..claim });
            }
        }
        for m in PRECEDENT.find_iter(line) {
            push(Claim {
                kind: ClaimKind::Precedent,
                text: m.as_str().into(),
                path: None,
                lines: None,
                column: None,
                planned_new: false,
                planned_gone: false,
            });
        }
    }
    out
}

fn path_claim(token: Token<'_>) -> Option<Claim> {
    let c = LINE_SUFFIX.captures(token.text)?;
    let path = parse_path(&c["path"], token.deliberate)?;
    let num = |name: &str| c.name(name).and_then(|m| m.as_str().parse::<usize>().ok());
    let from = num("l1").or_else(|| num("h1"));
    let lines = from.map(|f| (f, num("l2").or_else(|| num("h2")).unwrap_or(f)));
    if lines.is_some() && path.ends_with('/') {
        return None;
    }
    Some(Claim {
        kind: if lines.is_some() { ClaimKind::LineRef } else { ClaimKind::Path },
        text: token.text.to_string(),
        path: Some(path),
        lines,
        column: num("c1").or_else(|| num("hc")),
        planned_new: false,
        planned_gone: false,
    })
}

fn test_claim(token: &str) -> Option<Claim> {
    // `tests/test_api.py::test_login`: a test in a named file.
    let (path, name) = match token.split_once("::") {
        Some((file, rest)) => match parse_path(file, true) {
            Some(p) if !p.ends_with('/') => (Some(p), rest),
            _ => (None, token),
        },
        None => (None, token),
    };
    if !is_test_name(name) {
        return None;
    }
    Some(Claim {
        kind: ClaimKind::Test,
        text: token.to_string(),
        path,
        lines: None,
        column: None,
        planned_new: false,
        planned_gone: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<String> {
        extract_claims(text).into_iter().map(|c| c.text).collect()
    }

    #[test]
    fn claims_are_found_and_prose_is_not() {
        let text = "## Diagnosis\nThe bug is in `engine/chart.rs:40-42` and engine/forge/local.rs.\n\
                    See https://example.com/a/b.rs, e.g./i.e. v1.2, and `Cargo.toml`. Per P-0003.\n\
                    Create `engine/new.rs`.\n## Tests\n- `sweep_revives_once`\n- `a`\n";
        let claims = extract_claims(text);
        assert_eq!(
            texts(text),
            vec![
                "engine/chart.rs:40-42",
                "engine/forge/local.rs",
                "Cargo.toml",
                "P-0003",
                "engine/new.rs",
                "sweep_revives_once"
            ]
        );
        assert_eq!(claims[0].lines, Some((40, 42)));
        assert!(claims[4].planned_new);
    }

    #[test]
    fn every_line_form_is_read() {
        let cases = [
            ("`src/a.rs:10`", Some((10, 10)), None),
            ("src/a.rs:10:5", Some((10, 10)), Some(5)),
            ("src/a.rs:10-20", Some((10, 20)), None),
            ("src/a.rs:10–20", Some((10, 20)), None),
            ("src/a.rs#L10", Some((10, 10)), None),
            ("src/a.rs#L10-L20", Some((10, 20)), None),
            ("src/a.rs#L10C3-L12C1", Some((10, 12)), Some(3)),
            ("error at src/a.rs:483:9:", Some((483, 483)), Some(9)),
            ("[here](src/a.rs#L7)", Some((7, 7)), None),
            ("run `./src/a.rs:3 \"\"`", Some((3, 3)), None),
        ];
        for (text, lines, column) in cases {
            let c = extract_claims(text);
            assert_eq!(c.len(), 1, "{text}: {c:?}");
            assert_eq!(
                (c[0].kind, c[0].path.as_deref(), c[0].lines, c[0].column),
                (ClaimKind::LineRef, Some("src/a.rs"), lines, column),
                "{text}"
            );
        }
    }

    #[test]
    fn every_common_extension_and_extensionless_name_is_a_path() {
        for ext in [
            "rs", "py", "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "go", "java", "kt", "swift", "c", "h",
            "cc", "cpp", "hpp", "cs", "rb", "php", "scala", "sh", "yml", "yaml", "toml", "json", "md", "sql", "proto",
            "vue", "svelte", "tf", "nix", "lock", "csv", "bin", "png",
        ] {
            let text = format!("see `module.{ext}` and src/module.{ext}");
            assert_eq!(texts(&text), vec![format!("module.{ext}"), format!("src/module.{ext}")], "{ext}");
        }
        assert_eq!(
            texts("`Makefile`, services/api/Dockerfile, `Dockerfile.dev`, `.gitignore`, `.github/workflows/ci.yml`"),
            vec!["Makefile", "Dockerfile.dev", ".gitignore", ".github/workflows/ci.yml", "services/api/Dockerfile"]
        );
        assert_eq!(texts("`engine/forge/` holds both"), vec!["engine/forge/"]);
        assert_eq!(
            texts("see src/__tests__/a.test.js, pkg/__init__.py and _web/app.mjs_"),
            vec!["src/__tests__/a.test.js", "pkg/__init__.py", "web/app.mjs"]
        );
    }

    #[test]
    fn prose_urls_versions_and_times_are_not_claims() {
        let prose = "Upgrade to 1.2.3 (or v1.2) at 12:30, 09:15:00 UTC on 2026/01/02; ratio 3:2.\n\
                     See https://github.com/o/r/blob/main/src/x.rs#L10 and github.com/o/r/blob/main/y.rs,\n\
                     docs.rs/regex/latest/regex/struct.Regex.html, www.example.org/a.md, <https://x.io/a.ts>.\n\
                     Node.js, React/Vue.js, `Next.js`, and/or, I/O, TCP/IP, e.g. i.e. etc. N/A km/h.\n\
                     `std::fs::read`, `crate::chart`, `res.json()`, `request.json`, `os.path.join`, `src/**/*.rs`,\n\
                     `git@github.com:o/r.git`, `~/.bashrc`, `$HOME/x.sh`, `C:\\x\\y.cs`, python3.11, Python 3.11/3.12.\n\
                     Built on vercel/next.js and mrdoob/three.js; `ubuntu:22.04`, redis:7, 127.0.0.1:8080, HTTP/1.1.";
        assert_eq!(texts(prose), Vec::<String>::new());
    }

    #[test]
    fn diff_headers_name_the_file_not_a_and_b() {
        let text = "```diff\ndiff --git a/src/x.rs b/src/x.rs\n--- a/src/x.rs\n+++ b/src/x.rs\n```\n";
        assert_eq!(texts(text), vec!["src/x.rs"]);
    }

    #[test]
    fn tests_are_names_in_code_under_a_tests_heading_not_commands() {
        let text = "## Tests run\n- `pytest`, `cargo` and `RUST_LOG` are not tests\n- `appends_once`, `TestParse/empty`,\n\
                    - `chart::tests::appends_once`, `tests/test_api.py::test_login`, `LoginTest.testRefusesEmpty`\n\
                    ```\n# not a heading\n`in_a_fence`\n```\n## Latest findings\n- `not_a_test_heading`\n";
        let claims = extract_claims(text);
        let tests: Vec<(&str, &str, Option<&str>)> = claims
            .iter()
            .filter(|c| c.kind == ClaimKind::Test)
            .map(|c| (c.text.as_str(), c.test_identifier(), c.path.as_deref()))
            .collect();
        assert_eq!(
            tests,
            vec![
                ("appends_once", "appends_once", None),
                ("TestParse/empty", "TestParse", None),
                ("chart::tests::appends_once", "appends_once", None),
                ("tests/test_api.py::test_login", "test_login", Some("tests/test_api.py")),
                ("LoginTest.testRefusesEmpty", "testRefusesEmpty", None),
            ]
        );
    }

    #[test]
    fn removal_and_creation_words_mark_the_line() {
        let c = extract_claims("- Deleted `old/a.rs`\n- renamed `b.rs` to `c.rs`\n- `d.rs` (new)\n");
        let marks: Vec<(bool, bool)> = c.iter().map(|c| (c.planned_new, c.planned_gone)).collect();
        assert_eq!(marks, vec![(false, true), (true, true), (true, true), (true, false)]);
    }
}
