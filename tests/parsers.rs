//! Issue 13: the parsers under random input (property tests; cargo-fuzz
//! needs a nightly toolchain). Whatever the text, the chart and agent-notes
//! readers, the event parser, ward.yml and the precedent log answer with a
//! value or an error, never a panic; a chart the engine wrote reads back as
//! the notes it was given. Failing inputs are shrunk and printed by proptest
//! (`PROPTEST_CASES` raises the number of cases).

use std::path::Path;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use ward::chart::{Note, NoteKind, NoteMeta, Sentinels};
use ward::forge::IssueNumber;

/// Text made of what the parsers look for (sentinels, fences, YAML and JSON
/// punctuation) and anything else.
fn hostile_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("<!-- WARD:TRIAGE -->".to_string()),
        Just("<!-- /WARD:TRIAGE -->".to_string()),
        Just("<!-- WARD:OUTCOME ready -->".to_string()),
        Just("<!-- WARD:TREATMENT_PLAN run=r1 stage=s role=fellow at=2026-11-29T10:00:00Z -->".to_string()),
        Just("<!-- ward-chart v1 -->".to_string()),
        Just("```".to_string()),
        Just("\n".to_string()),
        Just("- id: P-0001\n".to_string()),
        Just("stages:\n  admit:\n".to_string()),
        Just("{\"action\":\"labeled\",\"issue\":{\"number\":1}}".to_string()),
        Just(": [ ] { } , \" ' & * ! | > % @ `".to_string()),
        any::<String>(),
    ];
    prop::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}

/// JSON objects with the keys an Actions payload has, nested at random, so
/// the event parser gets past its JSON check.
fn payload() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "action",
        "issue",
        "number",
        "label",
        "labels",
        "name",
        "client_payload",
        "sender",
        "login",
        "state",
        "event_type",
        "title",
        "body",
        "user",
        "repository",
        "full_name",
        "comment",
        "pull_request",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)),
        "[a-z:_-]{0,12}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("ward:admit")),
    ];
    let value = leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    });
    value.prop_map(|v| v.to_string())
}

fn note() -> impl Strategy<Value = Note> {
    let kind = prop::sample::select(NoteKind::ALL.to_vec());
    let word = "[a-z0-9][a-z0-9-]{0,9}";
    // Bodies with sentinel-like text, fences and Unicode; no edge whitespace
    // (the chart stores bodies trimmed).
    let body = prop_oneof![
        "[a-zA-Z0-9 <>!/:=`#-]{1,60}",
        "[^\\s]{1,20}( [^\\s]{1,20}){0,5}",
        Just("<!-- WARD:OUTCOME approve -->".to_string()),
        Just("line one\n<!-- /WARD:TRIAGE -->\nline three".to_string()),
    ]
    .prop_map(|b: String| b.trim().to_string())
    .prop_filter("a body", |b| !b.is_empty());
    (kind, word, word, word, 0i64..4_000_000_000, body).prop_map(|(kind, run, stage, role, secs, body)| Note {
        kind,
        meta: NoteMeta { run, stage, role, at: Utc.timestamp_opt(secs, 0).unwrap() },
        body,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_chart_readers_never_panic(text in hostile_text()) {
        let s = Sentinels::default();
        let _ = s.parse_chart(&text);
        let _ = s.parse_agent_notes(&text);
        let _ = s.append(IssueNumber(1), Some(&text), &[]);
    }

    #[test]
    fn a_chart_the_engine_wrote_reads_back_as_its_notes(notes in prop::collection::vec(note(), 1..12)) {
        let s = Sentinels::default();
        // Distinct notes (the chart drops a repeated note by design).
        let mut notes = notes;
        for (i, n) in notes.iter_mut().enumerate() {
            n.meta.run = format!("{}-{i}", n.meta.run);
        }
        let text = s.append(IssueNumber(1), None, &notes).unwrap().expect("new notes are written");
        let back = s.parse_chart(&text).unwrap();
        prop_assert_eq!(back.len(), notes.len(), "{}", text);
        for (b, n) in back.iter().zip(&notes) {
            prop_assert_eq!((b.kind, &b.meta), (n.kind, &n.meta));
            let stored = s.escape(&n.body);
            prop_assert_eq!(b.body.trim(), stored.trim(), "{}", text);
        }
        // Appending the same notes again adds nothing (a retried write).
        prop_assert_eq!(s.append(IssueNumber(1), Some(&text), &notes).unwrap(), None);
    }

    #[test]
    fn the_event_parser_never_panics(
        text in prop_oneof![hostile_text(), payload()],
        name in prop::option::of(prop_oneof![
            Just("issues".to_string()),
            Just("repository_dispatch".to_string()),
            Just("workflow_dispatch".to_string()),
            Just("schedule".to_string()),
            "[a-z_]{1,20}",
        ]),
    ) {
        let _ = ward::event::parse_event(&text, name.as_deref(), Path::new("event.json"));
    }

    #[test]
    fn ward_yml_never_panics(text in hostile_text()) {
        let _ = ward::config::Config::parse(&text, Path::new(".github/ward.yml"), None);
    }

    #[test]
    fn the_precedent_log_never_panics(text in hostile_text()) {
        let _ = ward::precedent::PrecedentLog::parse(&text, Path::new("precedents/log.yaml"));
        let _ = ward::precedent::check_log(&text, Some(&text), chrono::NaiveDate::MIN, "github-actions[bot]");
    }
}

/// The shipped files, cut at every 97th byte (on a character boundary):
/// a truncated write or a half-copied file is an error, never a panic.
#[test]
fn truncated_shipped_files_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let yml = std::fs::read_to_string(root.join(".github/ward.yml")).unwrap();
    let log = std::fs::read_to_string(root.join("precedents/log.yaml")).unwrap();
    for text in [&yml, &log] {
        for end in (0..text.len()).step_by(97).filter(|&i| text.is_char_boundary(i)) {
            let part = &text[..end];
            let _ = ward::config::Config::parse(part, Path::new(".github/ward.yml"), None);
            let _ = ward::precedent::PrecedentLog::parse(part, Path::new("precedents/log.yaml"));
        }
    }
}
