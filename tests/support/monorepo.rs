//! A synthetic monorepo shaped like the ones people have, for the
//! groundedness test and bench: 30,000 generated source files in 300
//! packages (every common extension), a submodule that is initialised
//! (named differently from its path) and one that is not, Git LFS files
//! (smudged, smudged with the object gone from the store, pointer only,
//! binary), `master` as its branch, and what an agent leaves before ward
//! commits: an untracked file, an ignored one, a changed file, a deleted one.
//! `data/smudged_only.csv` is smudged in the worktree and its object is
//! not in the store (removed on every use: `git status` puts it back).
//!
//! Built with `git fast-import` (one stream, not 30,000 writes), `git lfs`
//! and `git submodule`, once per version of this file, under
//! `CARGO_TARGET_TMPDIR`; later runs reuse it.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::Digest;

pub const FILES: usize = 30_000;

/// Every generated file's extension, in turn.
#[rustfmt::skip]
pub const EXTS: &[&str] = &[
    "rs", "py", "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "go", "java", "kt", "swift", "c", "h", "cc",
    "cpp", "hpp", "cs", "rb", "php", "scala", "sh", "yml", "yaml", "toml", "json", "md", "sql", "proto",
];

/// The test only the last generated file holds: finding it proves the
/// search has no cap.
pub const DEEP_TEST: &str = "deep_in_the_tree_test";
/// Lines appended to [`CHANGED`] in the worktree.
pub const APPENDED: usize = 10;
/// The generated file the agent changed, and the one it deleted.
pub const CHANGED: usize = 307;
pub const DELETED: usize = 205;

/// Path and line count of generated file `i`.
pub fn generated(i: usize) -> (String, usize) {
    let ext = EXTS[i % EXTS.len()];
    (format!("packages/pkg-{:03}/src/m{:02}.{ext}", i / 100, i % 100), 12 + (i * 7) % 40)
}

/// The first generated file with extension `ext` at or after `from`.
pub fn generated_with(ext: &str, from: usize) -> (String, usize) {
    (from..FILES).map(generated).find(|(p, _)| p.ends_with(&format!(".{ext}"))).expect("every extension recurs")
}

fn generated_text(i: usize) -> String {
    let (_, lines) = generated(i);
    let mut text: String = (1..=lines).map(|k| format!("l{k} f{i}\n")).collect();
    if i == FILES - 1 {
        text.push_str(&format!("fn {DEEP_TEST}() {{}}\n"));
    }
    text
}

/// 500, 300 and 400 numbered lines, and 4 KiB with NULs: the LFS files.
pub fn lfs_files() -> Vec<(&'static str, Vec<u8>)> {
    let numbered = |n: usize| (1..=n).map(|k| format!("{k},row {k}\n")).collect::<String>().into_bytes();
    vec![
        ("data/table.csv", numbered(500)),
        ("data/smudged_only.csv", numbered(300)),
        ("data/missing.csv", numbered(400)),
        ("assets/model.bin", (0..4096u32).map(|k| (k % 7) as u8).collect()),
    ]
}

fn pointer(content: &[u8]) -> (String, String) {
    let oid = format!("{:x}", sha2::Sha256::digest(content));
    let text = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {}\n", content.len());
    (oid, text)
}

pub struct Monorepo {
    /// The superproject's worktree (with the agent's leftovers).
    pub root: PathBuf,
}

/// The monorepo, built on first use (a lock keeps concurrent test and
/// bench binaries from building it twice).
pub fn monorepo() -> Monorepo {
    let source = include_str!("monorepo.rs");
    let version = format!("{:x}", sha2::Sha256::digest(source.as_bytes()));
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join(format!("monorepo-{}", &version[..12]));
    let lock = std::fs::File::create(base.join("monorepo.lock")).unwrap();
    lock.lock().unwrap();
    if !dir.join("READY").exists() {
        // Earlier versions of this file built their own; this one replaces them.
        for old in std::fs::read_dir(&base).unwrap().flatten() {
            if old.file_name().to_string_lossy().starts_with("monorepo-") && old.path().is_dir() {
                std::fs::remove_dir_all(old.path()).unwrap();
            }
        }
        build(&dir);
        std::fs::write(dir.join("READY"), "").unwrap();
    }
    let main = dir.join("main");
    // `git status` (the bench runs it) cleans the smudged file back into
    // the LFS store: the object is gone again for every use.
    let object = lfs_object(&main, &pointer(&lfs_files()[1].1).0);
    if object.exists() {
        std::fs::remove_file(object).unwrap();
    }
    Monorepo { root: main }
}

fn lfs_object(main: &Path, oid: &str) -> PathBuf {
    main.join(".git/lfs/objects").join(&oid[0..2]).join(&oid[2..4]).join(oid)
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "user.name=ward test", "-c", "user.email=test@ward.invalid", "-c", "protocol.file.allow=always"]);
    c
}

fn run(c: &mut Command) -> String {
    let out = c.output().expect("git runs");
    assert!(
        out.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One commit on `master` holding `files` and `links` (gitlinks).
fn fast_import(dir: &Path, files: &[(String, Vec<u8>)], links: &[(&str, &str)]) {
    let mut stream = Vec::new();
    for (i, (_, content)) in files.iter().enumerate() {
        write!(stream, "blob\nmark :{}\ndata {}\n", i + 1, content.len()).unwrap();
        stream.extend_from_slice(content);
        stream.push(b'\n');
    }
    let message = "The monorepo\n";
    write!(
        stream,
        "commit refs/heads/master\ncommitter ward test <test@ward.invalid> 1767225600 +0000\ndata {}\n{message}",
        message.len()
    )
    .unwrap();
    for (i, (path, _)) in files.iter().enumerate() {
        writeln!(stream, "M 100644 :{} {path}", i + 1).unwrap();
    }
    for (path, commit) in links {
        writeln!(stream, "M 160000 {commit} {path}").unwrap();
    }
    stream.push(b'\n');
    let mut child = git(dir).args(["fast-import", "--quiet"]).stdin(Stdio::piped()).spawn().expect("git fast-import");
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success(), "git fast-import failed in {}", dir.display());
}

fn build(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    // The submodule: a small C library with its own test.
    let sub = dir.join("lib-src");
    let core: String = (1..=200).map(|k| format!("int core_{k}(void) {{ return {k}; }}\n")).collect();
    let header: String = (1..=30).map(|k| format!("int core_{k}(void);\n")).collect();
    let sub_files = vec![
        ("src/core.c".to_string(), core.into_bytes()),
        ("include/core.h".to_string(), header.into_bytes()),
        ("tests/core_test.c".to_string(), b"#include \"core.h\"\nvoid test_core_sums(void) {}\n".to_vec()),
    ];
    std::fs::create_dir_all(&sub).unwrap();
    run(git(dir).args(["init", "--quiet", "--initial-branch=master"]).arg(&sub));
    fast_import(&sub, &sub_files, &[]);
    let sub_commit = run(git(&sub).args(["rev-parse", "master"]));

    // The superproject.
    let main = dir.join("main");
    let mut files: Vec<(String, Vec<u8>)> =
        (0..FILES).map(|i| (generated(i).0, generated_text(i).into_bytes())).collect();
    let gitmodules = format!(
        "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = {}\n[submodule \"absent\"]\n\tpath = vendor/absent\n\turl = {}\n",
        sub.display(),
        dir.join("absent-src").display()
    );
    let text = |s: &str| s.as_bytes().to_vec();
    files.extend([
        ("Makefile".into(), text("all:\n\tcargo build\n\ntest:\n\tcargo test\n")),
        ("services/api/Dockerfile".into(), text("FROM scratch\nCOPY api /api\nEXPOSE 8080\nENTRYPOINT [\"/api\"]\n")),
        ("README.md".into(), text("# monorepo\n\nGenerated for ward's groundedness test.\n")),
        (".gitignore".into(), text("/reports/\n*.log\n")),
        (
            ".gitattributes".into(),
            text("data/*.csv filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"),
        ),
        (".gitmodules".into(), gitmodules.into_bytes()),
        ("proto/api.proto".into(), (1..=10).map(|k| format!("// {k}\n")).collect::<String>().into_bytes()),
        ("web/lib/util.cjs".into(), text("'use strict';\nmodule.exports = {\n  add: (a, b) => a + b,\n};\n// end\n")),
        (
            "packages/pkg-007/tests/test_api.py".into(),
            text("import api\n\n\ndef test_login():\n    assert api.login('a')\n"),
        ),
    ]);
    std::fs::create_dir_all(&main).unwrap();
    run(git(dir).args(["init", "--quiet", "--initial-branch=master"]).arg(&main));
    run(git(&main).args(["lfs", "install", "--local"]));
    for (path, content) in lfs_files() {
        let (oid, pointer) = pointer(&content);
        if path != "data/missing.csv" {
            let object = lfs_object(&main, &oid);
            std::fs::create_dir_all(object.parent().unwrap()).unwrap();
            std::fs::write(object, &content).unwrap();
        }
        files.push((path.into(), pointer.into_bytes()));
    }
    fast_import(
        &main,
        &files,
        &[("vendor/lib", &sub_commit), ("vendor/absent", "1111111111111111111111111111111111111111")],
    );
    // Check out with LFS content where the store has it (`git lfs checkout`
    // leaves the pointer of an object it does not have). Writing 30,000
    // files is most of the build: in parallel.
    let checkout = ["-c", "checkout.workers=0", "checkout", "--quiet", "--force", "master"];
    run(git(&main).env("GIT_LFS_SKIP_SMUDGE", "1").args(checkout));
    run(git(&main).args(["lfs", "checkout"]));
    run(git(&main).args(["submodule", "--quiet", "update", "--init", "vendor/lib"]));

    // What the agent left.
    std::fs::create_dir_all(main.join("notes")).unwrap();
    std::fs::write(main.join("notes/left.md"), "# Left\n\nby the agent\nbefore the commit\n").unwrap();
    std::fs::create_dir_all(main.join("reports")).unwrap();
    std::fs::write(main.join("reports/run.txt"), "ignored\n").unwrap();
    let (changed, _) = generated(CHANGED);
    let mut text = generated_text(CHANGED);
    text.push_str(&"added\n".repeat(APPENDED));
    std::fs::write(main.join(&changed), text).unwrap();
    std::fs::remove_file(main.join(generated(DELETED).0)).unwrap();
}
