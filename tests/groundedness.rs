//! Groundedness on a repository shaped like the ones people have (see
//! `support/monorepo.rs`): a list of true and made-up claims, scored
//! against the worktree (before ward commits the agent's leftovers) and
//! against the commit alone (what a later job reading a bundle sees). It
//! prints the false positives (made-up claims that passed) and the false
//! negatives (honest claims refused) and asserts there are none.

#[path = "support/monorepo.rs"]
mod monorepo;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use monorepo::{APPENDED, CHANGED, DEEP_TEST, DELETED, generated, generated_with};
use ward::groundedness::{Facts, Score, Tree, extract_claims, score_notes};

/// What a claim is, in truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    /// It holds: it must be grounded.
    True,
    /// Made up: it must be refused.
    False,
    /// Cannot be told from what is here: listed, not counted.
    Unknowable,
    /// Not about the repository (an absolute path elsewhere): dropped.
    Dropped,
}
use Truth::*;

struct Case {
    /// How the note writes it (a code span unless `prose`).
    text: String,
    prose: bool,
    worktree: Truth,
    commit: Truth,
}

fn case(text: impl Into<String>, worktree: Truth, commit: Truth) -> Case {
    Case { text: text.into(), prose: false, worktree, commit }
}

fn both(text: impl Into<String>, truth: Truth) -> Case {
    case(text, truth, truth)
}

fn prose(text: impl Into<String>, truth: Truth) -> Case {
    Case { text: text.into(), prose: true, worktree: truth, commit: truth }
}

/// The claims a treatment note makes about the monorepo, with the truth.
fn paths(root: &Path) -> Vec<Case> {
    let g = |ext: &str| generated_with(ext, 29_000);
    let (mjs, n_mjs) = g("mjs");
    let (cjs, n_cjs) = g("cjs");
    let (jsx, n_jsx) = g("jsx");
    let (mts, n_mts) = g("mts");
    let (cts, n_cts) = g("cts");
    let (tsx, _) = g("tsx");
    let (rs, n_rs) = g("rs");
    let (py, n_py) = g("py");
    let (go, n_go) = g("go");
    let (changed, n_changed) = generated(CHANGED);
    let (deleted, _) = generated(DELETED);
    let renamed = rs.replace(".rs", ".mts");
    vec![
        // Every extension, every line form, at the far end of the tree.
        both(&mjs, True),
        both(format!("{mjs}:{n_mjs}"), True),
        both(format!("{mjs}:{}", n_mjs + 1), False),
        both(format!("{cjs}:{n_cjs}:1"), True),
        both(format!("{cjs}:{n_cjs}:300"), False),
        both(format!("{jsx}:1-{n_jsx}"), True),
        both(format!("{jsx}:{}-{}", n_jsx - 1, n_jsx + 3), False),
        both(format!("{mts}#L{n_mts}"), True),
        both(format!("{mts}#L{}", n_mts + 5), False),
        both(format!("{cts}#L1-L{n_cts}"), True),
        both(format!("{cts}#L1-L{}", n_cts + 1), False),
        both(format!("{tsx}#L2C1"), True),
        both(format!("{py}:{n_py}:4"), True),
        prose(format!("{rs}:{n_rs}"), True),
        prose(format!("{go}:{}:2", n_go + 1), False),
        both(&renamed, False),
        both("packages/pkg-290/src/invented.mjs", False),
        both("packages/pkg-290/lib/m01.cjs", False),
        both("web/lib/util.mjs", False),
        // Names without extensions, bare names, relative and folder paths.
        both("Makefile", True),
        both("Makefile:5", True),
        both("Makefile:6", False),
        both("services/api/Dockerfile:4", True),
        both("services/api/Dockerfile.prod", False),
        both("api.proto:10", True),
        both("api.proto:11", False),
        // A bare name found nowhere may be in the submodule that is not here.
        both("nothere.proto", Unknowable),
        both("../lib/util.cjs:5", True),
        both("./web/lib/util.cjs:2", True),
        both("./web/lib/util.cjs:9", False),
        both("packages/pkg-123/", True),
        both("packages/pkg-999/", False),
        // The submodule that is here, and the one that is not.
        both("vendor/lib/", True),
        both("vendor/lib/src/core.c:150", True),
        both("vendor/lib/src/core.c:201", False),
        both("vendor/lib/include/core.h#L30", True),
        both("vendor/lib/src/nothere.c", False),
        both("vendor/absent/", True),
        both("vendor/absent/src/x.c:10", Unknowable),
        both("vendor/absent/README.md", Unknowable),
        // LFS: the real content, never the pointer's three lines.
        both("data/table.csv:480", True),
        both("data/table.csv:501", False),
        case("data/smudged_only.csv:250", True, Unknowable),
        case("data/smudged_only.csv:301", False, Unknowable),
        both("data/missing.csv", True),
        both("data/missing.csv:10", Unknowable),
        both("assets/model.bin", True),
        both("assets/model.bin:2", False),
        // What the agent left: in the worktree, not in the commit.
        case("notes/left.md:4", True, False),
        case("notes/left.md:5", False, False),
        case("reports/run.txt", Unknowable, False),
        case(format!("{changed}:{}", n_changed + APPENDED), True, False),
        case(deleted, False, True),
        both("node_modules/left-pad/index.js:3", Unknowable),
        case(format!("{}/Makefile:2", root.display()), True, Dropped),
        both("/usr/include/stdio.h:10", Dropped),
        // Precedents.
        prose("P-0001", True),
        prose("P-0999", False),
    ]
}

fn tests() -> Vec<Case> {
    vec![
        both(DEEP_TEST, True),
        both("test_login", True),
        both("packages/pkg-007/tests/test_api.py::test_login", True),
        both("packages/pkg-007/tests/test_api.py::test_logout", False),
        both("core::test_core_sums", True),
        // The agent had no such test; a job without the submodule cannot tell.
        case("made_up_test_name", False, Unknowable),
    ]
}

/// Prose that names nothing checkable.
const PROSE: &str = "Upgraded to 1.2.3 (v2.0.1-beta) at 12:30 UTC, 10:45:30 on 2026/01/02, ratio 3:2; see \
                     https://github.com/o/r/blob/master/src/x.rs#L10, github.com/o/r/blob/master/y.mjs, docs.rs/regex, \
                     <https://example.org/a.ts>. Node.js, React/Vue.js, `Next.js`, and/or, I/O, e.g. i.e. etc., \
                     `std::fs::read`, `crate::chart`, `res.json()`, `request.json`, `console.log`, `process.env`, \
                     `os.path.join`, `src/**/*.mjs`, all `.mjs` and `.cts` files, `~/.bashrc`, `$HOME/x.sh`, \
                     `git@github.com:o/r.git`, python3.11, `cargo test --test groundedness`.";

fn note(paths: &[Case], tests: &[Case]) -> String {
    let mut text = String::from("## Changes against the plan\n");
    for c in paths {
        if c.prose {
            writeln!(text, "- as printed: {} holds", c.text).unwrap();
        } else {
            writeln!(text, "- `{}` holds", c.text).unwrap();
        }
    }
    writeln!(text, "\n{PROSE}\n\n## Tests run").unwrap();
    for c in tests {
        writeln!(text, "- `{}`: passed", c.text).unwrap();
    }
    text
}

/// How the score judged each claim, by its text.
fn verdicts(score: &Score) -> BTreeMap<String, Truth> {
    let mut out = BTreeMap::new();
    for c in &score.checked {
        out.insert(c.claim.text.clone(), if c.problem.is_none() { True } else { False });
    }
    for u in &score.unchecked {
        out.insert(u.claim.text.clone(), Unknowable);
    }
    out
}

#[derive(Default, Debug)]
struct Tally {
    claims: usize,
    /// Made-up claims that were not refused.
    false_positives: Vec<String>,
    /// Honest claims refused (true, or not checkable, yet judged false).
    false_negatives: Vec<String>,
    /// Other disagreements (a true claim judged not checkable, and so on).
    mislabelled: Vec<String>,
    /// Found in the note though no case lists it.
    spurious: Vec<String>,
}

fn judge(mode: &str, tree: &Tree, cases: &[Case], text: &str, pick: impl Fn(&Case) -> Truth) -> Tally {
    let precedents: HashSet<String> = ["P-0001".to_string()].into();
    let facts = Facts { tree, precedents: &precedents, after_treatment: true };
    let score = score_notes([("TREATMENT_NOTE", text)], &facts);
    let got = verdicts(&score);
    let mut t = Tally { claims: cases.len(), ..Tally::default() };
    let listed: HashSet<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    for claim in extract_claims(text) {
        if !listed.contains(claim.text.as_str()) {
            t.spurious.push(claim.text);
        }
    }
    let why = |text: &str| {
        score
            .checked
            .iter()
            .find(|c| c.claim.text == text)
            .and_then(|c| c.problem.clone())
            .or_else(|| score.unchecked.iter().find(|u| u.claim.text == text).map(|u| u.why.clone()))
            .unwrap_or_default()
    };
    for c in cases {
        let want = pick(c);
        let have = got.get(&c.text).copied().unwrap_or(Dropped);
        if want == have {
            continue;
        }
        let line = format!("{mode}: `{}` should be {want:?}, judged {have:?} {}", c.text, why(&c.text));
        match (want, have) {
            (False, _) => t.false_positives.push(line),
            (True | Unknowable, False) => t.false_negatives.push(line),
            _ => t.mislabelled.push(line),
        }
    }
    println!(
        "{mode}: {} claims ({} true, {} made up, {} not checkable, {} dropped); score {score}; \
         false positives: {}, false negatives: {}, mislabelled: {}, spurious: {}",
        t.claims,
        cases.iter().filter(|c| pick(c) == True).count(),
        cases.iter().filter(|c| pick(c) == False).count(),
        cases.iter().filter(|c| pick(c) == Unknowable).count(),
        cases.iter().filter(|c| pick(c) == Dropped).count(),
        t.false_positives.len(),
        t.false_negatives.len(),
        t.mislabelled.len(),
        t.spurious.len(),
    );
    for line in t.false_positives.iter().chain(&t.false_negatives).chain(&t.mislabelled) {
        println!("  {line}");
    }
    for s in &t.spurious {
        println!("  {mode}: spurious claim `{s}`");
    }
    t
}

fn assert_clean(t: &Tally) {
    assert!(
        t.false_positives.is_empty()
            && t.false_negatives.is_empty()
            && t.mislabelled.is_empty()
            && t.spurious.is_empty(),
        "{t:#?}"
    );
}

#[test]
fn true_and_made_up_claims_on_a_30000_file_monorepo() {
    let repo = monorepo::monorepo();
    let (paths, tests) = (paths(&repo.root), tests());
    let text = note(&paths, &tests);
    let cases: Vec<Case> = paths.into_iter().chain(tests).collect();

    let worktree = Tree::worktree(&repo.root).unwrap();
    assert!(worktree.file_count() > monorepo::FILES, "{} files listed", worktree.file_count());
    let w = judge("worktree", &worktree, &cases, &text, |c| c.worktree);

    let commit = Tree::commit(&repo.root, "master").unwrap();
    assert!(commit.describe().starts_with("commit "), "{}", commit.describe());
    let c = judge("commit", &commit, &cases, &text, |c| c.commit);

    assert_clean(&w);
    assert_clean(&c);
}

#[test]
fn the_reasons_say_what_could_not_be_read() {
    let repo = monorepo::monorepo();
    let tree = Tree::commit(&repo.root, "master").unwrap();
    let precedents = HashSet::new();
    let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
    let text = "`data/missing.csv:10`, `vendor/absent/src/x.c:10`, `data/table.csv:501`, `node_modules/a/b.js`";
    let score = score_notes([("TREATMENT_NOTE", text)], &facts);
    let reasons: Vec<String> = score.unchecked.iter().map(|u| format!("{} {}", u.claim.text, u.why)).collect();
    assert_eq!(reasons.len(), 3, "{reasons:#?}");
    assert!(
        reasons[0].starts_with("data/missing.csv:10 is stored in Git LFS and its content is not here"),
        "{reasons:#?}"
    );
    assert!(reasons[1].contains("the submodule `vendor/absent` is not initialised here"), "{reasons:#?}");
    assert!(reasons[2].contains("`node_modules/`, a folder of installed, built or git's own files"), "{reasons:#?}");
    // Out of range of the real 500 lines, not of the pointer's 3.
    assert_eq!(score.checked[0].problem.as_deref(), Some("is out of range: the file has 500 lines"));
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "protocol.file.allow=always"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// ward's worktrees are linked worktrees whose submodules are not checked
/// out: the submodule's files are still read from the main repository's
/// `modules/` folder.
#[test]
fn a_linked_worktree_reads_submodules_from_the_main_repository() {
    let dir = tempfile::tempdir().unwrap();
    let (sub, main) = (dir.path().join("sub"), dir.path().join("main"));
    for (repo, file, text) in [(&sub, "lib.c", "int a;\nint b;\n"), (&main, "README.md", "main\n")] {
        std::fs::create_dir_all(repo).unwrap();
        git(repo, &["init", "--quiet", "--initial-branch=master"]);
        std::fs::write(repo.join(file), text).unwrap();
        git(repo, &["add", "."]);
        git(repo, &["commit", "--quiet", "-m", "start"]);
    }
    git(&main, &["submodule", "--quiet", "add", sub.to_str().unwrap(), "third_party/sub"]);
    git(&main, &["commit", "--quiet", "-m", "submodule"]);
    let linked = dir.path().join("linked");
    git(&main, &["worktree", "add", "--quiet", "-b", "ward/issue-1", linked.to_str().unwrap()]);
    assert_eq!(std::fs::read_dir(linked.join("third_party/sub")).unwrap().count(), 0, "not checked out there");

    let tree = Tree::worktree(&linked).unwrap();
    let precedents = HashSet::new();
    let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
    let score = score_notes([("TREATMENT_NOTE", "`third_party/sub/lib.c:2` and `third_party/sub/lib.c:3`")], &facts);
    let got: Vec<(&str, Option<&str>)> =
        score.checked.iter().map(|c| (c.claim.text.as_str(), c.problem.as_deref())).collect();
    assert_eq!(
        got,
        vec![
            ("third_party/sub/lib.c:2", None),
            ("third_party/sub/lib.c:3", Some("is out of range: the file has 2 lines"))
        ]
    );
}

/// The later job: the visit's commits arrive as a git bundle, fetched into
/// a bare repository, and the claims are checked by commit id. Neither the
/// LFS objects nor the submodule travel in a bundle: those claims are not
/// checkable there, everything else is checked as in the worktree.
#[test]
fn a_bundle_fetched_into_a_bare_repository_is_checked_by_commit_id() {
    let dir = tempfile::tempdir().unwrap();
    let (sub, main) = (dir.path().join("sub"), dir.path().join("main"));
    for (repo, file, text) in
        [(&sub, "lib.c", "int a;\n"), (&main, "src/app.mjs", "export const a = 1;\nexport const b = 2;\n")]
    {
        std::fs::create_dir_all(repo.join("src")).unwrap();
        git(repo, &["init", "--quiet", "--initial-branch=master"]);
        std::fs::write(repo.join(file), text).unwrap();
        git(repo, &["add", "."]);
        git(repo, &["commit", "--quiet", "-m", "start"]);
    }
    git(&main, &["lfs", "install", "--local"]);
    std::fs::write(main.join(".gitattributes"), "*.csv filter=lfs diff=lfs merge=lfs -text\n").unwrap();
    std::fs::write(main.join("table.csv"), (1..=50).map(|k| format!("{k}\n")).collect::<String>()).unwrap();
    git(&main, &["submodule", "--quiet", "add", sub.to_str().unwrap(), "vendor/sub"]);
    git(&main, &["add", "."]);
    git(&main, &["commit", "--quiet", "-m", "visit"]);
    let bundle = dir.path().join("visit.bundle");
    git(&main, &["bundle", "create", "--quiet", bundle.to_str().unwrap(), "master"]);
    let bare = dir.path().join("job.git");
    git(dir.path(), &["init", "--quiet", "--bare", bare.to_str().unwrap()]);
    git(&bare, &["fetch", "--quiet", bundle.to_str().unwrap(), "master:refs/heads/visit"]);
    let id =
        String::from_utf8(Command::new("git").current_dir(&bare).args(["rev-parse", "visit"]).output().unwrap().stdout)
            .unwrap();

    let tree = Tree::commit(&bare, id.trim()).unwrap();
    assert_eq!(tree.describe(), format!("commit {}", &id.trim()[..10]));
    let precedents = HashSet::new();
    let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
    let note = "`src/app.mjs:2`, `src/app.mjs#L3`, `table.csv:40`, `vendor/sub/lib.c:1`, `vendor/sub/`";
    let score = score_notes([("TREATMENT_NOTE", note)], &facts);
    let checked: Vec<(&str, bool)> =
        score.checked.iter().map(|c| (c.claim.text.as_str(), c.problem.is_none())).collect();
    assert_eq!(checked, vec![("src/app.mjs:2", true), ("src/app.mjs#L3", false), ("vendor/sub/", true)]);
    let unchecked: Vec<&str> = score.unchecked.iter().map(|u| u.claim.text.as_str()).collect();
    assert_eq!(unchecked, vec!["table.csv:40", "vendor/sub/lib.c:1"], "{score:#?}");
}
