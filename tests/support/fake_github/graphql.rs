//! `POST /graphql`, answered from the fake's state like GitHub answers it.
//! The document is first checked against GitHub's published schema
//! (schema.rs: parsed, validated, its variables coerced); one that fails
//! is refused whole, as GitHub refuses it (HTTP 200, `errors`, no `data`),
//! and recorded, so the test fails. Then every field asked for is resolved
//! from the state, and the answer has GitHub's shape: `data` with exactly
//! the fields asked for, `errors` with `type` (`NOT_FOUND`, `FORBIDDEN`)
//! and `path`, the field itself `null`. A field the schema has but the fake
//! does not model is an error naming it and is recorded too. One request is
//! one call, however many fields it reads.
//!
//! GitHub's rules kept: connections need `first` or `last` (at most 100);
//! `object(expression: "branch:path")` is `null` for a missing file or
//! branch; `Blob.text` is `null` for binary content and cut (with
//! `isTruncated`) beyond [`BLOB_TEXT_LIMIT`]; `statusCheckRollup` and
//! `status` are `null` when nothing was reported; each field needs the
//! token's permission for what it reads (issues, contents, pull requests,
//! checks, statuses), else that field is `null` with a `FORBIDDEN` error.
//! An actor is a `User` or a `Bot`, and a bot's `login` has no `[bot]`
//! (`github-actions`, where REST says `github-actions[bot]`); a fragment
//! on an interface (`... on Actor`) matches every type that implements it.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use apollo_compiler::executable::ExecutableDocument;

use super::handlers::Answer;
use super::state::{FakeCheckRun, Grant, State};

/// How much of a blob's text GraphQL gives before cutting it.
pub const BLOB_TEXT_LIMIT: usize = 512 * 1024;

// -- The document, as the schema accepted it ---------------------------------

#[derive(Debug, Clone)]
enum Selection {
    Field { alias: Option<String>, name: String, args: Vec<(String, Arg)>, selections: Vec<Selection> },
    Fragment { on: String, selections: Vec<Selection> },
}

#[derive(Debug, Clone)]
enum Arg {
    Variable(String),
    Literal(Value),
    /// An enum value (`OPEN`, `ASC`) or `true`/`false`/`null`.
    Name(String),
    List(Vec<Arg>),
    Object(Vec<(String, Arg)>),
}

/// The operation of a document the schema accepted, in the fake's terms.
fn operation(doc: &ExecutableDocument) -> Result<(bool, Vec<Selection>), String> {
    let op = doc.operations.get(None).map_err(|e| e.message().to_string())?;
    let mutation = op.operation_type == apollo_compiler::executable::OperationType::Mutation;
    Ok((mutation, selections(doc, &op.selection_set)))
}

fn selections(doc: &ExecutableDocument, set: &apollo_compiler::executable::SelectionSet) -> Vec<Selection> {
    use apollo_compiler::executable::Selection as S;
    let mut out = Vec::new();
    for selection in &set.selections {
        match selection {
            S::Field(f) => out.push(Selection::Field {
                alias: f.alias.as_ref().map(|a| a.to_string()),
                name: f.name.to_string(),
                args: f.arguments.iter().map(|a| (a.name.to_string(), arg(&a.value))).collect(),
                selections: selections(doc, &f.selection_set),
            }),
            S::InlineFragment(i) => out.push(Selection::Fragment {
                on: i.type_condition.as_ref().map_or_else(|| set.ty.to_string(), |t| t.to_string()),
                selections: selections(doc, &i.selection_set),
            }),
            S::FragmentSpread(spread) => {
                if let Some(f) = doc.fragments.get(&spread.fragment_name) {
                    out.push(Selection::Fragment {
                        on: f.type_condition().to_string(),
                        selections: selections(doc, &f.selection_set),
                    });
                }
            }
        }
    }
    out
}

fn arg(value: &apollo_compiler::ast::Value) -> Arg {
    use apollo_compiler::ast::Value as V;
    match value {
        V::Null => Arg::Name("null".into()),
        V::Enum(name) => Arg::Name(name.to_string()),
        V::Variable(name) => Arg::Variable(name.to_string()),
        V::String(s) => Arg::Literal(json!(s)),
        V::Float(f) => Arg::Literal(json!(f.try_to_f64().unwrap_or_default())),
        V::Int(i) => Arg::Literal(json!(i.try_to_i32().map(i64::from).unwrap_or_default())),
        V::Boolean(b) => Arg::Name(b.to_string()),
        V::List(items) => Arg::List(items.iter().map(|i| arg(i)).collect()),
        V::Object(fields) => Arg::Object(fields.iter().map(|(k, v)| (k.to_string(), arg(v))).collect()),
    }
}

fn arg_value(arg: &Arg, variables: &Value) -> Value {
    match arg {
        Arg::Variable(name) => variables.get(name).cloned().unwrap_or(Value::Null),
        Arg::Literal(v) => v.clone(),
        Arg::Name(n) => match n.as_str() {
            "true" => json!(true),
            "false" => json!(false),
            "null" => Value::Null,
            other => json!(other),
        },
        Arg::List(items) => Value::Array(items.iter().map(|a| arg_value(a, variables)).collect()),
        Arg::Object(fields) => {
            Value::Object(fields.iter().map(|(k, a)| (k.clone(), arg_value(a, variables))).collect())
        }
    }
}

// -- The objects the fake can resolve ------------------------------------------

#[derive(Debug, Clone)]
enum Obj {
    Query,
    Repository,
    Issue(u64),
    Label(String),
    User(String),
    Blob {
        oid: String,
        bytes: Vec<u8>,
    },
    Pull(u64),
    Review {
        pull: u64,
        index: usize,
    },
    Thread(bool),
    LabelEvent(super::state::FakeLabelEvent),
    PullCommit(String),
    Commit(String),
    Rollup(String),
    CheckRun(FakeCheckRun),
    Status {
        context: String,
        state: String,
    },
    /// An issue comment, by its number.
    Comment(u64),
    /// A mutation's payload: `clientMutationId`, and the comment it wrote
    /// (`issueComment`, or `commentEdge { node }`).
    Payload {
        of: &'static str,
        comment: Option<u64>,
    },
    CommentEdge(u64),
    Connection {
        of: &'static str,
        items: Vec<Obj>,
        total: usize,
        has_next: bool,
        has_previous: bool,
        end: usize,
    },
    PageInfo {
        has_next: bool,
        has_previous: bool,
        end: usize,
    },
}

impl Obj {
    fn type_name(&self) -> &'static str {
        match self {
            Obj::Query => "Query",
            Obj::Repository => "Repository",
            Obj::Issue(_) => "Issue",
            Obj::Label(_) => "Label",
            // GitHub's bots are `Bot`s in GraphQL, people `User`s.
            Obj::User(login) if login.ends_with("[bot]") => "Bot",
            Obj::User(_) => "User",
            Obj::Blob { .. } => "Blob",
            Obj::Pull(_) => "PullRequest",
            Obj::Review { .. } => "PullRequestReview",
            Obj::Thread(_) => "PullRequestReviewThread",
            Obj::LabelEvent(e) if e.labeled => "LabeledEvent",
            Obj::LabelEvent(_) => "UnlabeledEvent",
            Obj::PullCommit(_) => "PullRequestCommit",
            Obj::Commit(_) => "Commit",
            Obj::Rollup(_) => "StatusCheckRollup",
            Obj::CheckRun(_) => "CheckRun",
            Obj::Status { .. } => "StatusContext",
            Obj::Comment(_) => "IssueComment",
            Obj::Payload { of, .. } => of,
            Obj::CommentEdge(_) => "IssueCommentEdge",
            Obj::Connection { of, .. } => of,
            Obj::PageInfo { .. } => "PageInfo",
        }
    }
}

/// What a field resolves to.
enum Out {
    Scalar(Value),
    Object(Box<Obj>),
    List(Vec<Obj>),
}

impl Out {
    fn object(o: Obj) -> Out {
        Out::Object(Box::new(o))
    }
}

/// A field's failure: GitHub's error `type` and message.
struct Failure {
    kind: &'static str,
    message: String,
}

fn fail(kind: &'static str, message: impl Into<String>) -> Failure {
    Failure { kind, message: message.into() }
}

fn node_id(prefix: &str, what: &str) -> Value {
    json!(format!("{prefix}_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(what)))
}

struct Resolver<'s> {
    state: &'s State,
    grant: &'s Grant,
    variables: &'s Value,
    errors: Vec<Value>,
    /// Fields the fake does not model: the test fails on them.
    unknown: Vec<String>,
}

impl Resolver<'_> {
    fn object(&mut self, obj: &Obj, selections: &[Selection], path: &[Value]) -> Value {
        let mut out = Map::new();
        self.select(obj, selections, path, &mut out);
        Value::Object(out)
    }

    fn select(&mut self, obj: &Obj, selections: &[Selection], path: &[Value], out: &mut Map<String, Value>) {
        for selection in selections {
            match selection {
                Selection::Fragment { on, selections } => {
                    if super::schema::matches(on, obj.type_name()) {
                        self.select(obj, selections, path, out);
                    }
                }
                Selection::Field { alias, name, args, selections } => {
                    let key = alias.clone().unwrap_or_else(|| name.clone());
                    let mut here = path.to_vec();
                    here.push(json!(key));
                    let args: BTreeMap<String, Value> =
                        args.iter().map(|(k, a)| (k.clone(), arg_value(a, self.variables))).collect();
                    let value = match self.field(obj, name, &args) {
                        Ok(Out::Scalar(v)) => v,
                        Ok(Out::Object(o)) => self.object(&o, selections, &here),
                        Ok(Out::List(items)) => Value::Array(
                            items
                                .iter()
                                .enumerate()
                                .map(|(i, o)| {
                                    let mut p = here.clone();
                                    p.push(json!(i));
                                    self.object(o, selections, &p)
                                })
                                .collect(),
                        ),
                        Err(f) => {
                            if f.kind == "undefinedField" {
                                self.unknown.push(format!("GraphQL field `{name}` on `{}`", obj.type_name()));
                            }
                            self.errors.push(json!({ "type": f.kind, "path": here, "message": f.message }));
                            Value::Null
                        }
                    };
                    out.insert(key, value);
                }
            }
        }
    }

    fn allowed(&self, scope: &str) -> Result<(), Failure> {
        if self.grant.permissions.allows(scope, false) {
            Ok(())
        } else {
            Err(fail("FORBIDDEN", "Resource not accessible by integration"))
        }
    }

    fn field(&self, obj: &Obj, name: &str, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
        let s = self.state;
        let scalar = |v: Value| Ok(Out::Scalar(v));
        if name == "__typename" {
            return scalar(json!(obj.type_name()));
        }
        let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match (obj, name) {
            (Obj::Query, "repository") => {
                let (owner, repo) = (text("owner"), text("name"));
                if !s.repo_exists || owner != s.owner || repo != s.repo {
                    return Err(fail(
                        "NOT_FOUND",
                        format!("Could not resolve to a Repository with the name '{owner}/{repo}'."),
                    ));
                }
                Ok(Out::object(Obj::Repository))
            }
            (Obj::Query, "search") => {
                self.allowed("issues")?;
                if args.get("type").and_then(Value::as_str) != Some("ISSUE") {
                    return Err(fail(
                        "undefinedField",
                        format!("search of type {:?} (the fake searches issues)", args.get("type")),
                    ));
                }
                let found = s.search_issues(&text("query")).map_err(|what| fail("undefinedField", what))?;
                let total = found.len();
                let items = found.into_iter().take(super::search::SEARCH_RESULTS).map(Obj::Issue).collect();
                match connection("SearchResultItemConnection", items, args)? {
                    Out::Object(mut page) => {
                        if let Obj::Connection { total: count, .. } = page.as_mut() {
                            *count = total; // `issueCount`: every match, beyond what is given
                        }
                        Ok(Out::Object(page))
                    }
                    other => Ok(other),
                }
            }
            (Obj::Repository, _) => self.repository_field(name, args),
            (Obj::Issue(n), _) => self.issue_field(*n, name, args),
            (Obj::Label(label), "name") => scalar(json!(label)),
            (Obj::Label(label), "id") => scalar(node_id("LA", &label.to_lowercase())),
            (Obj::Comment(id), _) => {
                let Some(c) = s.comments.iter().find(|c| c.id == *id) else {
                    return Err(fail("NOT_FOUND", format!("Could not resolve to a node with the id of comment {id}.")));
                };
                match name {
                    "id" => scalar(node_id("IC", &id.to_string())),
                    "databaseId" => scalar(json!(id)),
                    "body" => scalar(json!(c.body)),
                    "author" => Ok(Out::object(Obj::User(c.author.clone()))),
                    // The token's own account wrote it (GitHub's `viewer`).
                    "viewerDidAuthor" => scalar(json!(c.author == self.grant.login)),
                    "createdAt" => scalar(json!(c.at)),
                    _ => Err(undefined(name, obj)),
                }
            }
            (Obj::Payload { comment, .. }, _) => match (name, comment) {
                ("clientMutationId", _) => scalar(Value::Null),
                ("issueComment", Some(id)) => Ok(Out::object(Obj::Comment(*id))),
                ("commentEdge", Some(id)) => Ok(Out::object(Obj::CommentEdge(*id))),
                _ => Err(undefined(name, obj)),
            },
            (Obj::CommentEdge(id), "node") => Ok(Out::object(Obj::Comment(*id))),
            // GraphQL spells a bot's login without REST's `[bot]`.
            (Obj::User(login), "login") => scalar(json!(login.strip_suffix("[bot]").unwrap_or(login))),
            (Obj::Blob { oid, .. }, "oid") => scalar(json!(oid)),
            (Obj::Blob { bytes, .. }, "byteSize") => scalar(json!(bytes.len())),
            (Obj::Blob { bytes, .. }, "isBinary") => scalar(json!(std::str::from_utf8(bytes).is_err())),
            (Obj::Blob { bytes, .. }, "isTruncated") => scalar(json!(bytes.len() > BLOB_TEXT_LIMIT)),
            (Obj::Blob { bytes, .. }, "text") => scalar(match std::str::from_utf8(bytes) {
                Err(_) => Value::Null,
                Ok(t) if t.len() > BLOB_TEXT_LIMIT => {
                    let mut cut = BLOB_TEXT_LIMIT;
                    while !t.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    json!(&t[..cut])
                }
                Ok(t) => json!(t),
            }),
            (Obj::Pull(n), _) => self.pull_field(*n, name, args),
            (Obj::Review { pull, index }, _) => {
                let r = &s.pulls[pull].reviews[*index];
                match name {
                    "id" => scalar(node_id("PRR", &r.id.to_string())),
                    "state" => scalar(json!(r.state)),
                    "body" => scalar(json!(r.body)),
                    "submittedAt" => scalar(json!(r.submitted_at)),
                    "author" => Ok(Out::object(Obj::User(r.author.clone()))),
                    "commit" => Ok(Out::object(Obj::Commit(r.commit.clone()))),
                    "authorCanPushToRepository" => scalar(json!(s.can_write(&r.author))),
                    _ => Err(undefined(name, obj)),
                }
            }
            (Obj::Thread(resolved), "isResolved") => scalar(json!(resolved)),
            (Obj::LabelEvent(e), _) => match name {
                "createdAt" => scalar(json!(e.at)),
                "actor" => Ok(Out::object(Obj::User(e.actor.clone()))),
                "label" => Ok(Out::object(Obj::Label(e.label.clone()))),
                _ => Err(undefined(name, obj)),
            },
            (Obj::PullCommit(sha), "commit") => Ok(Out::object(Obj::Commit(sha.clone()))),
            (Obj::Commit(sha), _) => self.commit_field(sha, name, args),
            (Obj::Rollup(sha), "contexts") => {
                self.allowed("checks")?;
                self.allowed("statuses")?;
                let mut items: Vec<Obj> = self.latest_runs(sha).into_iter().map(Obj::CheckRun).collect();
                items.extend(self.statuses(sha));
                connection("StatusCheckRollupContextConnection", items, args)
            }
            (Obj::CheckRun(run), _) => match name {
                "name" => scalar(json!(run.name)),
                "status" => scalar(json!(run.status.to_uppercase())),
                "conclusion" => scalar(json!(run.conclusion.as_ref().map(|c| c.to_uppercase()))),
                "url" | "detailsUrl" => scalar(json!(run.html_url)),
                "title" => scalar(json!(run.title)),
                "summary" => scalar(json!(run.summary)),
                _ => Err(undefined(name, obj)),
            },
            (Obj::Status { context, state }, _) => match name {
                "context" => scalar(json!(context)),
                "state" => scalar(json!(state.to_uppercase())),
                "targetUrl" => scalar(json!(format!("{}/status/{context}", s.html_url()))),
                "description" => scalar(Value::Null),
                _ => Err(undefined(name, obj)),
            },
            (Obj::Connection { of, items, total, has_next, has_previous, end }, _) => match name {
                "nodes" => Ok(Out::List(items.clone())),
                "totalCount" => scalar(json!(total)),
                "issueCount" if *of == "SearchResultItemConnection" => scalar(json!(total)),
                "pageInfo" => {
                    Ok(Out::object(Obj::PageInfo { has_next: *has_next, has_previous: *has_previous, end: *end }))
                }
                _ => Err(undefined(name, obj)),
            },
            (Obj::PageInfo { has_next, has_previous, end }, _) => match name {
                "hasNextPage" => scalar(json!(has_next)),
                "hasPreviousPage" => scalar(json!(has_previous)),
                "endCursor" => scalar(json!(cursor(*end))),
                _ => Err(undefined(name, obj)),
            },
            _ => Err(undefined(name, obj)),
        }
    }

    fn repository_field(&self, name: &str, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
        let s = self.state;
        let scalar = |v: Value| Ok(Out::Scalar(v));
        let int = |k: &str| args.get(k).and_then(Value::as_u64).unwrap_or(0);
        let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match name {
            "labels" => {
                self.allowed("issues")?;
                connection("LabelConnection", s.labels.keys().cloned().map(Obj::Label).collect(), args)
            }
            "nameWithOwner" => scalar(json!(format!("{}/{}", s.owner, s.repo))),
            "issue" => {
                self.allowed("issues")?;
                let n = int("number");
                match s.issues.get(&n) {
                    Some(_) => Ok(Out::object(Obj::Issue(n))),
                    None => Err(fail("NOT_FOUND", format!("Could not resolve to an Issue with the number of {n}."))),
                }
            }
            "issues" => {
                self.allowed("issues")?;
                let states: Vec<String> = list(args.get("states"));
                let labels: Vec<String> = list(args.get("labels"));
                let mut items: Vec<&super::state::FakeIssue> = s
                    .issues
                    .values()
                    .filter(|i| states.is_empty() || states.contains(&if i.open { "OPEN" } else { "CLOSED" }.into()))
                    .filter(|i| labels.is_empty() || labels.iter().any(|l| i.labels.contains(l)))
                    .collect();
                // orderBy CREATED_AT (numbers grow with creation), ASC unless DESC.
                if args.get("orderBy").and_then(|o| o.get("direction")).and_then(Value::as_str) == Some("DESC") {
                    items.reverse();
                }
                let items = items.into_iter().map(|i| Obj::Issue(i.number)).collect();
                connection("IssueConnection", items, args)
            }
            "object" => {
                self.allowed("contents")?;
                let expression = text("expression");
                let Some((rev, path)) = expression.split_once(':') else {
                    return Err(fail("NOT_FOUND", format!("`{expression}` is not `rev:path`")));
                };
                Ok(match s.git.read_file(rev, path) {
                    Some((bytes, oid)) => Out::object(Obj::Blob { oid, bytes }),
                    None => Out::Scalar(Value::Null),
                })
            }
            "pullRequest" => {
                self.allowed("pull-requests")?;
                let n = int("number");
                match s.pulls.get(&n) {
                    Some(_) => Ok(Out::object(Obj::Pull(n))),
                    None => {
                        Err(fail("NOT_FOUND", format!("Could not resolve to a PullRequest with the number of {n}.")))
                    }
                }
            }
            "pullRequests" => {
                self.allowed("pull-requests")?;
                let states: Vec<String> = list(args.get("states"));
                let head = args.get("headRefName").and_then(Value::as_str);
                let items = s
                    .pulls
                    .values()
                    .filter(|p| head.is_none_or(|h| p.head == h))
                    .filter(|p| {
                        let state = if p.merged {
                            "MERGED"
                        } else if p.open {
                            "OPEN"
                        } else {
                            "CLOSED"
                        };
                        states.is_empty() || states.iter().any(|s| s == state)
                    })
                    .map(|p| Obj::Pull(p.number))
                    .collect();
                connection("PullRequestConnection", items, args)
            }
            _ => Err(undefined(name, &Obj::Repository)),
        }
    }

    fn issue_field(&self, n: u64, name: &str, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
        let i = &self.state.issues[&n];
        let scalar = |v: Value| Ok(Out::Scalar(v));
        match name {
            "id" => scalar(node_id("I", &n.to_string())),
            "number" => scalar(json!(n)),
            "title" => scalar(json!(i.title)),
            "body" => scalar(json!(i.body)),
            "state" => scalar(json!(if i.open { "OPEN" } else { "CLOSED" })),
            "createdAt" => scalar(json!(i.created_at)),
            "updatedAt" => scalar(json!(super::state::stamp(self.state.updated_at(n)))),
            "author" => Ok(Out::object(Obj::User(i.author.clone()))),
            "labels" => connection("LabelConnection", i.labels.iter().cloned().map(Obj::Label).collect(), args),
            "comments" => {
                let mine = self.state.comments.iter().filter(|c| c.issue == n).map(|c| Obj::Comment(c.id)).collect();
                connection("IssueCommentConnection", mine, args)
            }
            "timelineItems" => {
                // The fake keeps label events only: asking for more is asking for what it does not model.
                let types = list(args.get("itemTypes"));
                if types.is_empty() || types.iter().any(|t| t != "LABELED_EVENT" && t != "UNLABELED_EVENT") {
                    return Err(fail(
                        "undefinedField",
                        format!("timelineItems of types {types:?} (the fake keeps label events)"),
                    ));
                }
                let events = self.state.label_events.iter().filter(|e| e.issue == n);
                let items = events.filter(|e| {
                    types.contains(&if e.labeled { "LABELED_EVENT" } else { "UNLABELED_EVENT" }.to_string())
                });
                connection("IssueTimelineItemsConnection", items.cloned().map(Obj::LabelEvent).collect(), args)
            }
            _ => Err(undefined(name, &Obj::Issue(n))),
        }
    }

    fn pull_field(&self, n: u64, name: &str, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
        let s = self.state;
        let p = &s.pulls[&n];
        let scalar = |v: Value| Ok(Out::Scalar(v));
        match name {
            "id" => scalar(node_id("PR", &n.to_string())),
            "number" => scalar(json!(n)),
            "title" => scalar(json!(p.title)),
            "body" => scalar(json!(p.body)),
            "url" => scalar(json!(format!("{}/pull/{n}", s.html_url()))),
            "state" => scalar(json!(if p.merged {
                "MERGED"
            } else if p.open {
                "OPEN"
            } else {
                "CLOSED"
            })),
            "headRefName" => scalar(json!(p.head)),
            "headRefOid" => scalar(json!(p.head_sha)),
            "baseRefName" => scalar(json!(p.base)),
            // Every pull request of the fake comes from the repository itself.
            "isCrossRepository" => scalar(json!(false)),
            "isMergeQueueEnabled" => scalar(json!(s.merge_queues.contains_key(&p.base))),
            "isInMergeQueue" => scalar(json!(s.merge_group_of(n).is_some())),
            "author" => Ok(Out::object(Obj::User(p.author.clone()))),
            "reviews" => {
                let items = (0..p.reviews.len()).map(|index| Obj::Review { pull: n, index }).collect();
                connection("PullRequestReviewConnection", items, args)
            }
            "reviewThreads" => connection(
                "PullRequestReviewThreadConnection",
                p.threads.iter().map(|t| Obj::Thread(*t)).collect(),
                args,
            ),
            "commits" => {
                // As the REST listing: what the pull request brings onto its base.
                let base = match &p.merge_commit {
                    Some(merge) => s.git.commit(merge).and_then(|c| c.parents.first().cloned()),
                    None => s.git.branch_head(&p.base),
                };
                let items =
                    s.git.commits_between(base.as_deref(), &p.head_sha).into_iter().map(|c| Obj::PullCommit(c.sha));
                connection("PullRequestCommitConnection", items.collect(), args)
            }
            _ => Err(undefined(name, &Obj::Pull(n))),
        }
    }

    fn commit_field(&self, sha: &str, name: &str, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
        let s = self.state;
        let scalar = |v: Value| Ok(Out::Scalar(v));
        let commit = s.git.commit(sha);
        match name {
            "oid" => scalar(json!(sha)),
            "message" => scalar(json!(commit.map(|c| c.message.trim_end().to_string()))),
            "parents" => {
                let parents = commit.map(|c| c.parents).unwrap_or_default();
                connection("CommitConnection", parents.into_iter().map(Obj::Commit).collect(), args)
            }
            "statusCheckRollup" => {
                let nothing = self.latest_runs(sha).is_empty() && self.statuses(sha).is_empty();
                Ok(if nothing { Out::Scalar(Value::Null) } else { Out::object(Obj::Rollup(sha.into())) })
            }
            _ => Err(undefined(name, &Obj::Commit(sha.into()))),
        }
    }

    /// The latest run per app and name, as the REST listing.
    fn latest_runs(&self, sha: &str) -> Vec<FakeCheckRun> {
        let mut latest: BTreeMap<(String, String), &FakeCheckRun> = BTreeMap::new();
        for run in self.state.check_runs.iter().filter(|c| c.head_sha == sha) {
            latest.insert((run.app.clone(), run.name.clone()), run);
        }
        latest.into_values().cloned().collect()
    }

    fn statuses(&self, sha: &str) -> Vec<Obj> {
        let list = self.state.statuses.get(sha).into_iter().flatten();
        list.map(|(context, state)| Obj::Status { context: context.clone(), state: state.clone() }).collect()
    }
}

fn undefined(name: &str, obj: &Obj) -> Failure {
    fail("undefinedField", format!("Field '{name}' doesn't exist on type '{}'", obj.type_name()))
}

fn list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

fn cursor(end: usize) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("cursor:v2:{end}"))
}

fn uncursor(c: &str) -> Option<usize> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(c).ok()?;
    String::from_utf8(bytes).ok()?.strip_prefix("cursor:v2:")?.parse().ok()
}

/// A page of `items` per `first`/`last`/`after`, as GitHub pages.
fn connection(of: &'static str, items: Vec<Obj>, args: &BTreeMap<String, Value>) -> Result<Out, Failure> {
    let (first, last) = (args.get("first").and_then(Value::as_u64), args.get("last").and_then(Value::as_u64));
    if first.is_none() && last.is_none() {
        return Err(fail(
            "MISSING_PAGINATION_BOUNDARIES",
            format!("You must provide a `first` or `last` value to properly paginate the `{of}` connection."),
        ));
    }
    if first.or(last).is_some_and(|n| n > 100) {
        return Err(fail(
            "EXCESSIVE_PAGINATION",
            format!("Requesting more than 100 records on the `{of}` connection."),
        ));
    }
    let total = items.len();
    let start = args.get("after").and_then(Value::as_str).and_then(uncursor).unwrap_or(0).min(total);
    let (from, to) = match (first, last) {
        (Some(n), _) => (start, (start + n as usize).min(total)),
        (None, Some(n)) => (total.saturating_sub(n as usize).max(start), total),
        (None, None) => unreachable!("checked above"),
    };
    let page = items[from..to].to_vec();
    Ok(Out::object(Obj::Connection { of, items: page, total, has_next: to < total, has_previous: from > 0, end: to }))
}

impl State {
    /// Answers `POST /graphql` (see the module's comment).
    pub(super) fn graphql(&mut self, body: Option<&Value>, grant: &Grant) -> Answer {
        let ok = |v: Value| Answer { status: 200, headers: Vec::new(), body: Some(v) };
        let Some(body) = body else {
            return Answer {
                status: 400,
                headers: Vec::new(),
                body: Some(json!({ "message": "Problems parsing JSON" })),
            };
        };
        let query = body.get("query").and_then(Value::as_str).unwrap_or_default();
        let variables = body.get("variables").cloned().unwrap_or(Value::Null);
        // GitHub checks the whole request against its schema before it runs any of it.
        let doc = match super::schema::check(query, &variables) {
            Ok(doc) => doc,
            Err(errors) => {
                let said: Vec<&str> = errors.iter().filter_map(|e| e["message"].as_str()).collect();
                self.unknown.push(format!("a GraphQL document GitHub's schema refuses: {said:?}\n{query}"));
                return ok(super::schema::refusal(errors));
            }
        };
        let (mutation, selections) = match operation(&doc) {
            Ok(op) => op,
            Err(message) => return ok(super::schema::refusal(vec![json!({ "message": message })])),
        };
        if mutation {
            return ok(self.mutate(&selections, &variables, grant));
        }
        let mut r = Resolver { state: self, grant, variables: &variables, errors: Vec::new(), unknown: Vec::new() };
        let data = r.object(&Obj::Query, &selections, &[]);
        let (errors, unknown) = (r.errors, r.unknown);
        if !unknown.is_empty() {
            // GitHub validates before it runs: an unknown field is no data at all.
            self.unknown.extend(unknown);
            return ok(json!({ "errors": errors }));
        }
        if errors.is_empty() { ok(json!({ "data": data })) } else { ok(json!({ "data": data, "errors": errors })) }
    }
}

// -- Mutations: the ones ward sends for a move ---------------------------------

/// The number behind a node id the fake gave (`I_…` an issue, `IC_…` a
/// comment), or the label name behind `LA_…`.
fn node_of(id: &str, prefix: &str) -> Option<String> {
    let rest = id.strip_prefix(prefix)?.strip_prefix('_')?;
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD.decode(rest).ok()?;
    String::from_utf8(bytes).ok()
}

fn not_a_node(id: &str) -> Failure {
    fail("NOT_FOUND", format!("Could not resolve to a node with the global id of '{id}'"))
}

impl State {
    /// A mutation document, as GitHub runs one: its fields one after the
    /// other, each on its own (one that fails is `null` with an error in
    /// `errors`; those before it took effect, those after it still run).
    fn mutate(&mut self, selections: &[Selection], variables: &Value, grant: &Grant) -> Value {
        let (mut data, mut errors) = (Map::new(), Vec::new());
        for selection in selections {
            let Selection::Field { alias, name, args, selections } = selection else { continue };
            let key = alias.clone().unwrap_or_else(|| name.clone());
            let args: BTreeMap<String, Value> =
                args.iter().map(|(k, a)| (k.clone(), arg_value(a, variables))).collect();
            let input = args.get("input").cloned().unwrap_or(Value::Null);
            // Enqueueing is merging: `contents: write`, as the REST merge.
            let scope = if name == "enqueuePullRequest" { "contents" } else { "issues" };
            let done = if grant.permissions.allows(scope, true) {
                self.mutation(name, &input)
            } else {
                Err(fail("FORBIDDEN", "Resource not accessible by integration"))
            };
            let value = match done {
                Ok(payload) => {
                    let mut r = Resolver { state: self, grant, variables, errors: Vec::new(), unknown: Vec::new() };
                    let v = r.object(&payload, selections, &[json!(key)]);
                    errors.extend(r.errors);
                    self.unknown.extend(r.unknown);
                    v
                }
                Err(f) => {
                    if f.kind == "undefinedField" {
                        self.unknown.push(format!("GraphQL mutation `{name}`"));
                    }
                    errors.push(json!({ "type": f.kind, "path": [key], "message": f.message }));
                    Value::Null
                }
            };
            data.insert(key, value);
        }
        if errors.is_empty() { json!({ "data": data }) } else { json!({ "data": data, "errors": errors }) }
    }

    fn mutation(&mut self, name: &str, input: &Value) -> Result<Obj, Failure> {
        let text = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let issue = |k: &str| {
            let id = text(k);
            let n = node_of(&id, "I").and_then(|n| n.parse::<u64>().ok());
            n.filter(|n| self.issues.contains_key(n)).ok_or_else(|| not_a_node(&id))
        };
        let actor = self.actor.clone();
        match name {
            "addLabelsToLabelable" | "removeLabelsFromLabelable" => {
                let n = issue("labelableId")?;
                let mut names = Vec::new();
                for id in input.get("labelIds").and_then(Value::as_array).into_iter().flatten() {
                    let id = id.as_str().unwrap_or_default();
                    let name =
                        node_of(id, "LA").filter(|l| self.labels.contains_key(l)).ok_or_else(|| not_a_node(id))?;
                    names.push(self.labels[&name].name.clone());
                }
                let mut labels = self.labels_of(n);
                if name == "addLabelsToLabelable" {
                    labels.extend(names);
                } else {
                    labels.retain(|l| !names.iter().any(|x| x.eq_ignore_ascii_case(l)));
                }
                self.apply_labels(n, &labels, &actor);
                let of = if name == "addLabelsToLabelable" {
                    "AddLabelsToLabelablePayload"
                } else {
                    "RemoveLabelsFromLabelablePayload"
                };
                Ok(Obj::Payload { of, comment: None })
            }
            "updateIssueComment" => {
                let id = text("id");
                let c = node_of(&id, "IC").and_then(|c| c.parse::<u64>().ok()).ok_or_else(|| not_a_node(&id))?;
                if self.edit_comment(c, &json!({ "body": text("body") })).status != 200 {
                    return Err(not_a_node(&id));
                }
                Ok(Obj::Payload { of: "UpdateIssueCommentPayload", comment: Some(c) })
            }
            "addComment" => {
                let n = issue("subjectId")?;
                let id = self.add_comment(n, &text("body"), &actor);
                Ok(Obj::Payload { of: "AddCommentPayload", comment: Some(id) })
            }
            "enqueuePullRequest" => {
                let id = text("pullRequestId");
                let n = node_of(&id, "PR").and_then(|n| n.parse::<u64>().ok());
                let n = n.filter(|n| self.pulls.contains_key(n)).ok_or_else(|| not_a_node(&id))?;
                self.enqueue(n, &text("expectedHeadOid")).map_err(|(kind, message)| fail(kind, message))?;
                Ok(Obj::Payload { of: "EnqueuePullRequestPayload", comment: None })
            }
            other => Err(fail("undefinedField", format!("Field '{other}' doesn't exist on type 'Mutation'"))),
        }
    }
}
