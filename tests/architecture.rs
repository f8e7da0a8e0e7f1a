//! The shape of `engine/`, checked: its import graph has no cycle, and no
//! function grows past what a reader takes in at once. Both read the source
//! as text (`use crate::...`, `crate::...` paths, `super::...`), which is
//! what a person reviewing a change reads too.
//!
//! The import graph has two levels. Top level: `engine/<name>.rs` and
//! `engine/<name>/` are one module each, and no module may reach itself
//! through the modules it uses. Inside a folder: its files are the modules,
//! with the same rule, except for the folder's `mod.rs`, which is its facade
//! (it declares and re-exports its files, and they may use the items it
//! defines).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LONGEST_FUNCTION: usize = 150;

fn engine() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("engine")
}

/// Every `.rs` file under `engine/`, with its module path (`stage::guard`).
fn modules() -> Vec<(Vec<String>, String)> {
    fn walk(dir: &Path, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut p = prefix.to_vec();
                p.push(name);
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut p = prefix.to_vec();
                if name != "mod" && !(prefix.is_empty() && (name == "lib" || name == "main")) {
                    p.push(name);
                }
                out.push((p, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&engine(), &[], &mut out);
    out
}

/// The file's code without its test module and without comments.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The module paths a file refers to: `crate::a::b` and `super::a`, each
/// resolved against the known modules to the longest module prefix.
fn references(module: &[String], text: &str, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let code = code(text);
    let mut found = BTreeSet::new();
    let mut paths: Vec<Vec<String>> = Vec::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| ident(c) || c == ':') {
            continue;
        }
        paths.push(segments(&code[i + "crate::".len()..]));
    }
    // `super::` from a file is relative to its parent module (a folder's
    // mod.rs is the folder itself, so its `super` is one level higher).
    for (i, _) in code.match_indices("super::") {
        if i > 0 && code[..i].ends_with(|c: char| ident(c) || c == ':') {
            continue;
        }
        let mut base = module.to_vec();
        base.pop();
        base.extend(segments(&code[i + "super::".len()..]));
        paths.push(base);
    }
    // `use` groups: `crate::a::{b, c::d}` names b and c under a.
    for (i, _) in code.match_indices("::{") {
        let before = &code[..i];
        let start = before.rfind(|c: char| !(ident(c) || c == ':')).map_or(0, |s| s + 1);
        let head = &before[start..];
        let base: Vec<String> = match head.strip_prefix("crate") {
            Some("") => Vec::new(),
            Some(rest) if rest.starts_with("::") => rest[2..].split("::").map(str::to_string).collect(),
            _ => continue,
        };
        let end = code[i..].find('}').map_or(code.len(), |e| i + e);
        for item in code[i + 3..end].split(',') {
            let mut p = base.clone();
            p.extend(segments(item.trim()));
            paths.push(p);
        }
    }
    for path in paths {
        let resolved = (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p));
        if let Some(target) = resolved {
            found.insert(target);
        }
    }
    found
}

fn segments(text: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// A cycle in `graph`, as the path that closes it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut path = stack[from..].to_vec();
                    path.push(next.clone());
                    return Some(path);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// Module -> the modules it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level graph, and one graph per folder.
fn graphs() -> (Graph, BTreeMap<String, Graph>) {
    let modules = modules();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).filter(|m| !m.is_empty()).collect();
    let mut top: Graph = BTreeMap::new();
    let mut folders: BTreeMap<String, Graph> = BTreeMap::new();
    for (module, text) in &modules {
        let Some(first) = module.first() else { continue }; // lib.rs and main.rs declare, they are no module
        top.entry(first.clone()).or_default();
        for target in references(module, text, &known) {
            if target[0] != *first {
                top.entry(first.clone()).or_default().insert(target[0].clone());
                continue;
            }
            // Inside one folder: files of the same parent, the facade left out.
            let folder = module[..module.len().saturating_sub(1)].join("::");
            let is_facade = |m: &[String]| m.len() < 2 || m[..m.len() - 1].join("::") != folder;
            if module.len() >= 2 && target.len() == module.len() && !is_facade(module) && !is_facade(&target) {
                let graph = folders.entry(folder.clone()).or_default();
                graph.entry(module.join("::")).or_default();
                if target != *module {
                    graph.entry(module.join("::")).or_default().insert(target.join("::"));
                }
            }
        }
    }
    (top, folders)
}

#[test]
fn the_import_graph_of_engine_has_no_cycle() {
    let (top, folders) = graphs();
    assert!(top.len() >= 20, "the engine's modules were found: {:?}", top.keys());
    assert!(top["stage"].contains("transfer") && top["transfer"].contains("chart"), "edges are read: {top:#?}");
    if let Some(c) = cycle(&top) {
        panic!("engine/ has an import cycle: {}\nedges: {top:#?}", c.join(" -> "));
    }
    for (folder, graph) in &folders {
        if let Some(c) = cycle(graph) {
            panic!("engine/{folder}/ has an import cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into();
    assert_eq!(cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let known: BTreeSet<Vec<String>> =
        [vec!["chart".to_string()], vec!["config".to_string()], vec!["stage".to_string(), "guard".to_string()]].into();
    let refs = references(
        &["stage".to_string(), "judge".to_string()],
        "use crate::chart::{Note, Seen};\nuse super::guard::Patient;\nfn f() { crate::config::X }\n",
        &known,
    );
    assert_eq!(refs.len(), 3, "{refs:?}");
}

/// Functions in `engine/` (test modules aside), with their length in lines.
fn functions() -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (module, text) in modules() {
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(&text).to_string();
        let lines: Vec<&str> = code.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let trimmed = line.trim_start();
            let signature = ["fn ", "pub fn ", "async fn ", "pub async fn ", "pub(crate) fn ", "pub(crate) async fn "]
                .iter()
                .find_map(|p| trimmed.strip_prefix(p));
            let Some(rest) = signature else {
                i += 1;
                continue;
            };
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let indent = line.len() - trimmed.len();
            // The body ends at the first line back at the signature's indent that closes it.
            let mut j = i;
            while j < lines.len() && !lines[j].trim_end().ends_with('{') && !lines[j].trim_end().ends_with(';') {
                j += 1;
            }
            if j < lines.len() && lines[j].trim_end().ends_with(';') {
                i = j + 1;
                continue;
            }
            let mut k = j + 1;
            while k < lines.len()
                && !(lines[k].len() > indent
                    && lines[k][..indent].trim().is_empty()
                    && lines[k][indent..].starts_with('}'))
            {
                k += 1;
            }
            out.push((k - i + 1, format!("{}::{name}", module.join("::"))));
            i += 1;
        }
    }
    out.sort_by(|a, b| b.cmp(a));
    out
}

#[test]
fn no_function_in_engine_is_longer_than_a_reader_takes_in() {
    let all = functions();
    assert!(all.len() > 300, "functions were found: {}", all.len());
    let long: Vec<&(usize, String)> = all.iter().filter(|(n, _)| *n > LONGEST_FUNCTION).collect();
    assert!(long.is_empty(), "functions over {LONGEST_FUNCTION} lines: {long:?}");
    println!("the five longest: {:?}", &all[..5]);
}

/// The module map's entries as paths (`stage/mod.rs`, `forge/github/`),
/// read from the tree's indentation: an entry is a name ending in `.rs` or
/// `/` at two spaces per level; deeper lines continue a description.
fn mapped_paths(map: &str) -> BTreeSet<String> {
    let block = map.split("```").nth(1).expect("the module map is a code block");
    let mut folders: Vec<String> = Vec::new();
    let mut paths = BTreeSet::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        let name = line.split_whitespace().next().unwrap_or("");
        let is_entry = !name.is_empty() && (name.ends_with(".rs") || name.ends_with('/'));
        // engine/ is at 0, its entries at 2: the depth below engine/ is indent/2 - 1.
        if !is_entry || indent % 2 != 0 || indent == 0 || indent / 2 - 1 > folders.len() {
            continue;
        }
        folders.truncate(indent / 2 - 1);
        let path = format!("{}{name}", folders.concat());
        if name.ends_with('/') {
            folders.push(name.to_string());
        }
        // `github/mod.rs` under `forge/` names the folder `forge/github/` too.
        for (i, _) in path.match_indices('/') {
            paths.insert(path[..=i].to_string());
        }
        paths.insert(path);
    }
    paths
}

#[test]
fn the_architecture_document_names_every_module_at_its_path() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md")).unwrap();
    let map = doc.split("## Module map").nth(1).expect("a module map").split("\n## ").next().unwrap();
    let mapped = mapped_paths(map);
    let mut actual = BTreeSet::new();
    fn walk(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let here = format!("{rel}{name}/");
                out.insert(here.clone());
                walk(&path, &here, out);
            } else if name.ends_with(".rs") {
                out.insert(format!("{rel}{name}"));
            }
        }
    }
    walk(&engine(), "", &mut actual);
    let missing: Vec<_> = actual.difference(&mapped).collect();
    let stale: Vec<_> = mapped.difference(&actual).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's module map does not name {missing:?}, and names what is not there: {stale:?}"
    );
}

#[test]
fn the_map_reader_places_each_entry_under_its_folder() {
    let map = "```\nengine/\n  a.rs             about a, whose\n                   b.rs continues\n  f/               folder\n    mod.rs         its facade\n    g/             deeper\n      h.rs         here\n    k/l.rs         in a folder named with it\n  i.rs             back up\n```\n";
    let paths: Vec<_> = mapped_paths(map).into_iter().collect();
    assert_eq!(paths, ["a.rs", "f/", "f/g/", "f/g/h.rs", "f/k/", "f/k/l.rs", "f/mod.rs", "i.rs"]);
}

/// The hospital's shared state (`state/`) is owned by no department: the
/// stage runner and discharge read it without importing the charge nurse.
#[test]
fn stage_and_discharge_do_not_import_the_sweep() {
    let (top, _) = graphs();
    for module in ["stage", "discharge", "state"] {
        assert!(!top[module].contains("sweep"), "engine/{module}/ imports sweep: {:?}", top[module]);
    }
    assert!(top["sweep"].contains("state") && top["stage"].contains("state"), "the edges are read: {top:#?}");
}

/// Each `Result<…, String>` in `text` (comments aside), as the line it
/// starts on and the type as written: `Result<Vec<u8>, String>`, across
/// lines too, and `std::result::Result` the same.
fn string_errors(text: &str) -> Vec<(usize, String)> {
    let code: String =
        text.lines().map(|l| if l.trim_start().starts_with("//") { "" } else { l }).collect::<Vec<_>>().join("\n");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (start, _) in code.match_indices("Result<") {
        if code[..start].ends_with(ident) {
            continue;
        }
        // The generic arguments: to the `>` that closes `Result<`, split at
        // the commas outside any inner `<>`, `()` or `[]` (`->` is no bracket).
        let open = start + "Result<".len();
        let (mut depth, mut cuts, mut end) = (1usize, vec![open], None);
        let bytes = code.as_bytes();
        for (i, c) in code[open..].char_indices().map(|(i, c)| (open + i, c)) {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if bytes[i - 1] == b'-' => {}
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                ',' if depth == 1 => cuts.push(i + 1),
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        cuts.push(end + 1);
        let mut args: Vec<String> =
            cuts.windows(2).map(|w| code[w[0]..w[1] - 1].chars().filter(|c| !c.is_whitespace()).collect()).collect();
        if args.last().is_some_and(String::is_empty) {
            args.pop(); // a trailing comma
        }
        let error = args.last().map_or("", String::as_str);
        if args.len() == 2 && (error == "String" || error == "std::string::String") {
            let line = code[..start].matches('\n').count() + 1;
            let written: String = code[start..=end].split_whitespace().collect::<Vec<_>>().join(" ");
            found.push((line, written));
        }
    }
    // `FromStr`/`TryFrom` with a `String` error is the same `Result<_, String>`.
    for (start, _) in code.match_indices("type Err") {
        let rest: String = code[start..].chars().take_while(|c| *c != ';').filter(|c| !c.is_whitespace()).collect();
        if rest == "typeErr=String" || rest == "typeErr=std::string::String" {
            found.push((code[..start].matches('\n').count() + 1, "type Err = String".to_string()));
        }
    }
    found.sort();
    found
}

/// Errors at the boundaries are types (`thiserror` where callers tell
/// cases apart, `anyhow` with context above them), never a bare `String`:
/// the sentences people read are their `Display`.
#[test]
fn no_result_in_engine_carries_its_error_as_a_string() {
    let mut offences = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let rel = path.strip_prefix(engine()).unwrap().display().to_string();
                out.extend(string_errors(&text).into_iter().map(|(line, t)| format!("engine/{rel}:{line}: {t}")));
            }
        }
    }
    walk(&engine(), &mut offences);
    assert!(
        offences.is_empty(),
        "`Result<_, String>` in engine/ (give the error a type: a thiserror enum at the boundary, or anyhow with \
         context):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_string_error_scan_finds_them_where_they_hide() {
    let text = "fn a() -> Result<Vec<(u8, String)>, String> {}\n\
                // fn commented() -> Result<(), String>\n\
                fn b() -> std::result::Result<\n    Option<String>,\n    String,\n> {}\n\
                type Fact<T> = Result<T, String>;\n\
                fn c(f: impl Fn() -> u8) -> Result<String, Error> {}\n\
                fn d() -> anyhow::Result<String> {}\n\
                fn e() -> io::Result<Box<dyn Fn(u8) -> String>> {}\n\
                fn f() -> MyResult<(), String> {}\n\
                impl FromStr for M { type Err = String; }\n\
                impl FromStr for N { type Err = NotAnN; }\n";
    let lines: Vec<usize> = string_errors(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [1, 3, 7, 12], "{:?}", string_errors(text));
}
