//! `cargo bench --bench groundedness`: what scoring a note costs on the
//! 30,000-file monorepo of the groundedness test (a submodule, LFS files,
//! an agent's leftovers), with git's own commands on the same repository,
//! in the same run, for scale:
//!
//! - reading the tree: [`Tree::worktree`] (HEAD, the leftovers through
//!   git's status, the submodule) against `git status` + `git ls-tree -r`;
//!   [`Tree::commit`] against `git ls-tree -r`;
//! - scoring a typical treatment note (paths, line references, two tests
//!   found early) on the tree read;
//! - the worst case: a test named nowhere, so every file is searched,
//!   against `git grep -w` of the same word in the same commit.
//!
//! Prints medians. `WARD_BENCH_ROUNDS` sets the rounds (default 7).

#[path = "../tests/support/monorepo.rs"]
mod monorepo;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use ward::groundedness::{Facts, Tree, score_notes};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn git(root: &std::path::Path, args: &[&str]) {
    let out = Command::new("git").current_dir(root).args(args).output().expect("git runs");
    // `git grep` exits 1 when nothing matches: that is the point here.
    assert!(out.status.code().is_some_and(|c| c <= 1), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn main() {
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let built = Instant::now();
    let repo = monorepo::monorepo();
    let root = repo.root.as_path();
    println!("monorepo ready in {} (built once, then reused): {}", ms(built.elapsed()), root.display());

    let (rs, n_rs) = monorepo::generated_with("rs", 12_000);
    let (mjs, n_mjs) = monorepo::generated_with("mjs", 20_000);
    let typical = format!(
        "## Changes against the plan\n- `{rs}:{n_rs}`: the fix.\n- `{mjs}#L2-L{n_mjs}`: its caller.\n\
         - `vendor/lib/src/core.c:150` read, `data/table.csv:480` holds the failing row.\n\
         - `Makefile`, `services/api/Dockerfile:4`, `notes/left.md:3`, `api.proto:10`.\n\
         ## Tests run\n- `test_login`, `packages/pkg-007/tests/test_api.py::test_login`: passed.\n"
    );
    let worst = format!("{typical}- `no_such_test_anywhere`: passed.\n");
    let precedents = HashSet::new();

    let worktree = time(rounds, || Tree::worktree(root).expect("tree"));
    let commit = time(rounds, || Tree::commit(root, "master").expect("tree"));
    let tree = Tree::worktree(root).expect("tree");
    let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
    let score = score_notes([("TREATMENT_NOTE", typical.as_str())], &facts);
    assert_eq!((score.checked.len(), score.grounded()), (10, 10), "{score:#?}");
    let typical_t = time(rounds, || score_notes([("TREATMENT_NOTE", typical.as_str())], &facts));
    let worst_t = time(rounds, || score_notes([("TREATMENT_NOTE", worst.as_str())], &facts));
    let head = Tree::commit(root, "master").expect("tree");
    let head_facts = Facts { tree: &head, ..facts };
    let worst_commit = time(rounds, || score_notes([("TREATMENT_NOTE", worst.as_str())], &head_facts));

    let status = time(rounds, || git(root, &["status", "--porcelain", "--ignore-submodules"]));
    let ls_tree = time(rounds, || git(root, &["ls-tree", "-r", "--full-tree", "master"]));
    let grep = time(rounds, || git(root, &["grep", "-w", "-F", "-q", "no_such_test_anywhere", "master"]));

    println!("files listed: {} (worktree), {} (commit)", tree.file_count(), head.file_count());
    println!(
        "read the worktree's tree:   {:>9}   (git status + git ls-tree -r: {})",
        ms(worktree),
        ms(status + ls_tree)
    );
    println!("read a commit's tree:       {:>9}   (git ls-tree -r: {})", ms(commit), ms(ls_tree));
    println!(
        "score a typical note:       {:>9}   ({} claims; with reading the tree: {})",
        ms(typical_t),
        score.checked.len(),
        ms(worktree + typical_t)
    );
    println!("score with a test nowhere:  {:>9}   (worktree; every file searched)", ms(worst_t));
    println!(
        "                            {:>9}   (commit; git grep -w of the commit: {}, ratio {:.2})",
        ms(worst_commit),
        ms(grep),
        worst_commit.as_secs_f64() / grep.as_secs_f64()
    );
}
