//! Every GraphQL document ward can send, against GitHub's published schema
//! (`tests/fixtures/github/graphql/schema.graphql`, octokit/graphql-schema):
//! valid, with variables of the types the documents declare, and asking
//! every actor whether it is a bot. And the fake GitHub answering an
//! invalid document the way GitHub does.

mod support;

use apollo_compiler::executable::{ExecutableDocument, Selection, SelectionSet};
use serde_json::{Value, json};
use support::fake_github::{FakeGitHub, TOKEN, schema};

#[test]
fn every_graphql_document_ward_can_send_is_valid_against_githubs_schema() {
    let documents = ward::forge::github::graphql_documents();
    // The eight fixed ones, the move's eight shapes, two searches, two reads of due patients.
    assert_eq!(documents.len(), 20, "{:#?}", documents.iter().map(|d| &d.name).collect::<Vec<_>>());
    let mut refused = Vec::new();
    for d in &documents {
        if let Err(errors) = schema::check(&d.query, &d.variables) {
            refused.push(format!("{}: {errors:#?}\n{}", d.name, d.query));
        }
    }
    assert!(refused.is_empty(), "GitHub's schema refuses:\n{}", refused.join("\n\n"));
}

#[test]
fn every_login_ward_reads_over_graphql_comes_with_whether_it_is_a_bot() {
    // GraphQL's `Bot.login` has no `[bot]`: without `__typename` beside it,
    // `github-actions` the bot and a person called `github-actions` read alike.
    let mut bare = Vec::new();
    for d in ward::forge::github::graphql_documents() {
        let doc = schema::check(&d.query, &d.variables).expect("valid (the test above)");
        logins_without_typename(&doc, &doc.operations.get(None).unwrap().selection_set, &d.name, &mut bare);
    }
    assert!(bare.is_empty(), "`login` asked without `__typename`: {bare:#?}");
}

fn logins_without_typename(doc: &ExecutableDocument, set: &SelectionSet, name: &str, out: &mut Vec<String>) {
    let fields: Vec<&str> = set
        .selections
        .iter()
        .filter_map(|s| match s {
            Selection::Field(f) => Some(f.name.as_str()),
            _ => None,
        })
        .collect();
    if fields.contains(&"login") && !fields.contains(&"__typename") {
        out.push(format!("{name}: a `{}`'s login", set.ty));
    }
    for s in &set.selections {
        match s {
            Selection::Field(f) => logins_without_typename(doc, &f.selection_set, name, out),
            Selection::InlineFragment(i) => logins_without_typename(doc, &i.selection_set, name, out),
            Selection::FragmentSpread(f) => {
                if let Some(fragment) = doc.fragments.get(&f.fragment_name) {
                    logins_without_typename(doc, &fragment.selection_set, name, out);
                }
            }
        }
    }
}

#[test]
fn the_schema_is_githubs_with_only_its_known_flaw() {
    // GitHub's SDL defines two fields of `EnterpriseOwnerInfo` twice; a new
    // copy of the schema with any other problem shows up here.
    let problems = schema::schema_problems();
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems.iter().all(|p| p.contains("EnterpriseOwnerInfo")), "{problems:#?}");
    let s = schema::schema();
    assert!(s.types.contains_key("Bot") && s.is_subtype("Actor", "Bot") && s.is_subtype("Actor", "User"));
}

#[test]
fn a_document_the_schema_refuses_is_refused_whole_as_github_refuses_it() {
    let bogus = "query($n: Int!) { repository(owner: \"o\", name: \"r\") { issue(number: $n) { number colour } } }";
    let errors = schema::check(bogus, &json!({ "n": 1 })).unwrap_err();
    assert!(errors[0]["message"].as_str().unwrap().contains("colour"), "{errors:?}");
    // A variable of the wrong type is refused before anything runs, too.
    let wrong = "query($n: Int!) { repository(owner: \"o\", name: \"r\") { issue(number: $n) { number } } }";
    assert!(schema::check(wrong, &json!({ "n": "seven" })).is_err());
    assert!(schema::check(wrong, &json!({})).is_err(), "a required variable missing");
    assert!(schema::check(wrong, &json!({ "n": 7 })).is_ok());
    // An unused variable and an undefined one: GitHub's validation refuses both.
    assert!(schema::check("query($x: Int) { viewer { login } }", &json!({})).is_err());
    assert!(schema::check("query { repository(owner: $o, name: \"r\") { id } }", &json!({})).is_err());
}

/// POSTs `body` to the fake's `/graphql` with the token, over plain HTTP.
async fn post(gh: &FakeGitHub, body: &Value) -> (String, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = gh.url.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    let (head, json) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), serde_json::from_str(json).unwrap())
}

#[tokio::test]
async fn the_fake_answers_an_invalid_document_with_errors_and_no_data() {
    let gh = FakeGitHub::start().await;
    let query = "query($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { nameWithOwner \
                 issues(first: 1) { nodes { number colour } } } }";
    let (status, answer) =
        post(&gh, &json!({ "query": query, "variables": { "owner": "octo", "name": "hospital" } })).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(answer.get("data").is_none(), "no `data` at all: {answer}");
    assert!(answer["errors"][0]["message"].as_str().unwrap().contains("colour"), "{answer}");
    assert!(answer["errors"][0]["locations"].is_array(), "{answer}");
    let unknown = std::mem::take(&mut gh.state().unknown);
    assert!(unknown.len() == 1 && unknown[0].contains("schema refuses"), "the test would fail: {unknown:?}");
    // The same document without the field runs.
    let (_, answer) = post(
        &gh,
        &json!({ "query": query.replace(" colour", ""), "variables": { "owner": "octo", "name": "hospital" } }),
    )
    .await;
    assert_eq!(answer["data"]["repository"]["nameWithOwner"], "octo/hospital", "{answer}");
}

#[tokio::test]
async fn the_fake_spells_a_bots_login_as_graphql_does() {
    let gh = FakeGitHub::start().await;
    let n = gh.state().add_issue("a bot's issue", "", support::fake_github::ENGINE, &[]);
    let person = gh.state().add_issue("a person's issue", "", "alice", &[]);
    let query = "query($owner: String!, $name: String!, $a: Int!, $b: Int!) { repository(owner: $owner, name: $name) { \
                 a: issue(number: $a) { author { __typename ... on Bot { login } } } \
                 b: issue(number: $b) { author { __typename ... on Actor { login } } } } }";
    let variables = json!({ "owner": "octo", "name": "hospital", "a": n, "b": person });
    let (_, answer) = post(&gh, &json!({ "query": query, "variables": variables })).await;
    let a = &answer["data"]["repository"]["a"]["author"];
    assert_eq!((a["__typename"].as_str(), a["login"].as_str()), (Some("Bot"), Some("github-actions")), "{answer}");
    let b = &answer["data"]["repository"]["b"]["author"];
    assert_eq!((b["__typename"].as_str(), b["login"].as_str()), (Some("User"), Some("alice")), "{answer}");
}
