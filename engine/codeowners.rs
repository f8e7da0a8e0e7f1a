//! CODEOWNERS, read the way GitHub reads it (pure): the first of
//! `.github/CODEOWNERS`, `CODEOWNERS`, `docs/CODEOWNERS`; one pattern and
//! its owners a line; for a path, the last matching pattern wins. Patterns
//! follow gitignore: `*` within a segment, `**` across segments, a leading
//! `/` anchors at the top, a pattern without a `/` matches at any depth,
//! and a pattern naming a folder owns everything under it.

use std::path::Path;

use regex::Regex;

/// Where GitHub looks, in order; the first file found is used.
pub const LOCATIONS: [&str; 3] = [".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"];

/// One line: a pattern and its owners (`@user`, `@org/team`, or an email).
#[derive(Debug, Clone)]
pub struct Rule {
    matcher: Regex,
    pub owners: Vec<String>,
}

/// The rules of the repository at `root`, from the first CODEOWNERS file
/// found (none: no rules).
pub fn load(root: &Path) -> Vec<Rule> {
    LOCATIONS.iter().find_map(|l| std::fs::read_to_string(root.join(l)).ok()).map(|t| parse(&t)).unwrap_or_default()
}

/// The rules of a CODEOWNERS file; lines that are not rules (comments,
/// blanks, a pattern the parser cannot read) are skipped, as GitHub does.
pub fn parse(text: &str) -> Vec<Rule> {
    text.lines()
        .filter_map(|line| {
            let line = line.split(" #").next().unwrap_or_default().trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let mut words = line.split_whitespace();
            let matcher = matcher(words.next()?)?;
            Some(Rule { matcher, owners: words.map(str::to_string).collect() })
        })
        .collect()
}

fn matcher(pattern: &str) -> Option<Regex> {
    let anchored = pattern.starts_with('/');
    let p = pattern.trim_start_matches('/').trim_end_matches('/');
    if p.is_empty() {
        return None;
    }
    let mut re = String::from("^");
    if !anchored && !p.contains('/') {
        re.push_str("(?:.*/)?");
    }
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                re.push_str(".*");
                i += 1;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re.push_str("(?:/.*)?$");
    Regex::new(&re).ok()
}

/// The owners of `path`: the last rule that matches it (an empty owner
/// list there means nobody owns it).
pub fn owners_of<'a>(rules: &'a [Rule], path: &str) -> &'a [String] {
    rules.iter().rev().find(|r| r.matcher.is_match(path)).map_or(&[], |r| &r.owners)
}

/// The people and teams to ask for a review of a change to `paths`:
/// `(logins, team slugs)`, each once, in order; emails are skipped (the
/// API takes logins), and so is `except` (the pull request's author).
pub fn reviewers_for(rules: &[Rule], paths: &[String], except: &str) -> (Vec<String>, Vec<String>) {
    let (mut users, mut teams) = (Vec::new(), Vec::new());
    for owner in paths.iter().flat_map(|p| owners_of(rules, p)) {
        let Some(name) = owner.strip_prefix('@') else { continue };
        let (list, name) = match name.split_once('/') {
            Some((_org, team)) => (&mut teams, team),
            None => (&mut users, name),
        };
        if !name.eq_ignore_ascii_case(except) && !list.iter().any(|n: &String| n == name) {
            list.push(name.to_string());
        }
    }
    (users, teams)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# owners\n*       @all\n*.rs    @rusty  # Rust\n/docs/  @writers\nsrc/**/db.rs @org/dba\n\
                        build/logs/ \n/engine/forge/ @forger dev@example.com\n";

    #[test]
    fn the_last_matching_pattern_wins() {
        let rules = parse(FILE);
        assert_eq!(owners_of(&rules, "README.md"), ["@all"]);
        assert_eq!(owners_of(&rules, "deep/in/x.rs"), ["@rusty"], "no slash: any depth");
        assert_eq!(owners_of(&rules, "docs/guide/a.md"), ["@writers"], "a folder owns what is under it");
        assert_eq!(owners_of(&rules, "x/docs/a.md"), ["@all"], "a leading slash anchors");
        assert_eq!(owners_of(&rules, "src/a/b/db.rs"), ["@org/dba"]);
        assert!(owners_of(&rules, "build/logs/1.txt").is_empty(), "a rule without owners unowns");
        assert_eq!(owners_of(&rules, "engine/forge/mod.rs"), ["@forger", "dev@example.com"]);
    }

    #[test]
    fn reviewers_are_logins_and_team_slugs_once_each_without_the_author() {
        let rules = parse(FILE);
        let paths = ["a.rs", "b.rs", "src/x/db.rs", "engine/forge/mod.rs", "README.md"].map(String::from);
        let (users, teams) = reviewers_for(&rules, &paths, "all");
        assert_eq!(users, ["rusty", "forger"]);
        assert_eq!(teams, ["dba"]);
    }
}
