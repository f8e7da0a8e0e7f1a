//! docstore: a tiny document store that stands in for a database emulator
//! (think Cosmos DB) in ward's tests. Standard library only, so it links
//! statically and runs in a `FROM scratch` image.
//!
//! Server (`docstore serve`):
//! - data on `DOCSTORE_PORT` (default 8081), readiness on `DOCSTORE_READY_PORT`
//!   (default 8082): `GET /ready` answers 200 once `DOCSTORE_READY_DELAY_MS`
//!   (default 0) has passed, 503 before; `DOCSTORE_NEVER_READY=1` keeps it 503.
//! - documents are addressed by database, container, id and partition key:
//!   `PUT|GET|DELETE /dbs/{db}/colls/{coll}/docs/{id}` with header
//!   `x-partition-key: {pk}`; `GET /dbs/{db}/colls/{coll}/docs` lists ids;
//!   `GET /export` gives every document, one line each, sorted (below).
//! - every stored document has an ETag (`"<n>"`, from one counter), returned
//!   on reads and writes; `If-Match: <etag>` makes a write conditional (412 on
//!   a stale or missing document), `If-None-Match: *` makes it create-only.
//! - prints `docstore ready` on stdout when /ready starts answering 200.
//!
//! Client (for seed commands and stand-in agents), endpoint from
//! `DOCSTORE_ENDPOINT` (e.g. `http://127.0.0.1:49153`):
//! - `docstore put DB COLL ID PK BODY [IF_MATCH]` prints the new ETag;
//! - `docstore get DB COLL ID PK` prints `ETAG<TAB>BODY`;
//! - `docstore seed FILE`: one document per line, `DB<TAB>COLL<TAB>ID<TAB>PK<TAB>BODY`.
//! - `docstore export`: every document on stdout, one line each in the seed
//!   file's order of fields, sorted, with `\`, tab, newline and carriage
//!   return escaped as `\\`, `\t`, `\n`, `\r` (ward's checkpoints);
//! - `docstore import`: reads such lines on stdin into the store.
//!
//! Exit codes: 0 success, 1 HTTP status other than 2xx (printed), 2 usage or I/O error.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Key = (String, String, String, String); // db, coll, partition key, id

#[derive(Default)]
struct Store {
    next_etag: u64,
    docs: BTreeMap<Key, (String, String)>, // etag, body
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

struct Response {
    status: u16,
    etag: Option<String>,
    body: String,
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        412 => "Precondition Failed",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

fn read_request(stream: &mut TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    Ok(Request { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn write_response(stream: &mut TcpStream, r: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.body.len()
    );
    if let Some(etag) = &r.etag {
        head.push_str(&format!("ETag: {etag}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(r.body.as_bytes())?;
    stream.flush()
}

fn error(status: u16, message: &str) -> Response {
    Response { status, etag: None, body: format!("{{\"error\":\"{}\"}}", message.replace('"', "'")) }
}

/// A field of an export line: no tab or line break left unescaped.
fn escape(field: &str) -> String {
    field.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn export(store: &Store) -> String {
    let mut out = String::new();
    for ((db, coll, pk, id), (_, body)) in &store.docs {
        let fields = [db, coll, id, pk, body].map(|f| escape(f));
        out.push_str(&fields.join("\t"));
        out.push('\n');
    }
    out
}

fn handle(store: &Mutex<Store>, req: &Request) -> Response {
    if req.path == "/export" && req.method == "GET" {
        let store = store.lock().unwrap_or_else(|e| e.into_inner());
        return Response { status: 200, etag: None, body: export(&store) };
    }
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let (db, coll, id) = match segments.as_slice() {
        ["dbs", db, "colls", coll, "docs"] => (*db, *coll, None),
        ["dbs", db, "colls", coll, "docs", id] => (*db, *coll, Some(*id)),
        _ => return error(404, &format!("no route for {}", req.path)),
    };
    let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
    let Some(id) = id else {
        if req.method != "GET" {
            return error(405, "only GET lists documents");
        }
        let pk = req.header("x-partition-key");
        let ids: Vec<String> = store
            .docs
            .keys()
            .filter(|(d, c, p, _)| d == db && c == coll && pk.is_none_or(|pk| pk == p))
            .map(|(_, _, p, i)| format!("{{\"id\":\"{i}\",\"partitionKey\":\"{p}\"}}"))
            .collect();
        return Response { status: 200, etag: None, body: format!("[{}]", ids.join(",")) };
    };
    let Some(pk) = req.header("x-partition-key") else {
        return error(400, "the x-partition-key header is required");
    };
    let key: Key = (db.into(), coll.into(), pk.into(), id.into());
    match req.method.as_str() {
        "GET" => match store.docs.get(&key) {
            Some((etag, body)) => Response { status: 200, etag: Some(etag.clone()), body: body.clone() },
            None => error(404, &format!("document {id} in partition {pk} not found")),
        },
        "PUT" => {
            let current = store.docs.get(&key).map(|(e, _)| e.clone());
            if let Some(expected) = req.header("if-match") {
                if current.as_deref() != Some(expected) {
                    return error(412, &format!("etag {expected} is stale (current: {current:?})"));
                }
            }
            if req.header("if-none-match") == Some("*") && current.is_some() {
                return error(412, "document exists");
            }
            store.next_etag += 1;
            let etag = format!("\"{}\"", store.next_etag);
            store.docs.insert(key, (etag.clone(), req.body.clone()));
            let status = if current.is_some() { 200 } else { 201 };
            Response { status, etag: Some(etag), body: req.body.clone() }
        }
        "DELETE" => match store.docs.remove(&key) {
            Some(_) => Response { status: 204, etag: None, body: String::new() },
            None => error(404, "not found"),
        },
        _ => error(405, "method not allowed"),
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn serve() -> Result<(), String> {
    let port = env_or("DOCSTORE_PORT", "8081");
    let ready_port = env_or("DOCSTORE_READY_PORT", "8082");
    let delay = Duration::from_millis(env_or("DOCSTORE_READY_DELAY_MS", "0").parse().unwrap_or(0));
    let never = env_or("DOCSTORE_NEVER_READY", "") == "1";
    let data = TcpListener::bind(format!("0.0.0.0:{port}")).map_err(|e| format!("bind data port {port}: {e}"))?;
    let ready =
        TcpListener::bind(format!("0.0.0.0:{ready_port}")).map_err(|e| format!("bind ready port {ready_port}: {e}"))?;
    println!("docstore listening on 0.0.0.0:{port}, readiness on 0.0.0.0:{ready_port}");
    let started = Instant::now();
    std::thread::spawn(move || {
        for stream in ready.incoming().flatten() {
            let mut stream = stream;
            let ok = !never && started.elapsed() >= delay;
            let r = if ok {
                Response { status: 200, etag: None, body: "{\"ready\":true}".into() }
            } else {
                error(503, "starting")
            };
            let _ = read_request(&mut stream).and_then(|_| write_response(&mut stream, &r));
        }
    });
    if !never {
        // The log line a log-line readiness probe waits for.
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            println!("docstore ready");
        });
    }
    let store = Arc::new(Mutex::new(Store::default()));
    for stream in data.incoming() {
        let Ok(mut stream) = stream else { continue };
        let store = store.clone();
        std::thread::spawn(move || {
            if let Ok(req) = read_request(&mut stream) {
                let r = handle(&store, &req);
                eprintln!("{} {} -> {}", req.method, req.path, r.status);
                let _ = write_response(&mut stream, &r);
            }
        });
    }
    Ok(())
}

/// One HTTP/1.1 exchange: (status, etag, body).
fn http(
    method: &str,
    path: &str,
    pk: Option<&str>,
    if_match: Option<&str>,
    body: &str,
) -> Result<(u16, Option<String>, String), String> {
    let endpoint = std::env::var("DOCSTORE_ENDPOINT").map_err(|_| "DOCSTORE_ENDPOINT is not set".to_string())?;
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(authority).map_err(|e| format!("connect {authority}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    if let Some(pk) = pk {
        req.push_str(&format!("x-partition-key: {pk}\r\n"));
    }
    if let Some(etag) = if_match {
        req.push_str(&format!("If-Match: {etag}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).map_err(|e| format!("send to {authority}: {e}"))?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).map_err(|e| format!("read from {authority}: {e}"))?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("malformed response")?;
    let etag = head.lines().find_map(|l| {
        l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("etag")).map(|(_, v)| v.trim().to_string())
    });
    Ok((status, etag, body.to_string()))
}

fn doc_path(db: &str, coll: &str, id: &str) -> String {
    format!("/dbs/{db}/colls/{coll}/docs/{id}")
}

fn run(args: &[String]) -> Result<u8, String> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        [] | ["serve"] => serve().map(|_| 0),
        ["put", db, coll, id, pk, body, rest @ ..] if rest.len() <= 1 => {
            let (status, etag, resp) = http("PUT", &doc_path(db, coll, id), Some(pk), rest.first().copied(), body)?;
            if (200..300).contains(&status) {
                println!("{}", etag.unwrap_or_default());
                Ok(0)
            } else {
                eprintln!("docstore put {db}/{coll}/{id} [{pk}]: HTTP {status} {resp}");
                Ok(1)
            }
        }
        ["get", db, coll, id, pk] => {
            let (status, etag, resp) = http("GET", &doc_path(db, coll, id), Some(pk), None, "")?;
            if status == 200 {
                println!("{}\t{resp}", etag.unwrap_or_default());
                Ok(0)
            } else {
                eprintln!("docstore get {db}/{coll}/{id} [{pk}]: HTTP {status} {resp}");
                Ok(1)
            }
        }
        ["seed", file] => {
            let text = std::fs::read_to_string(file).map_err(|e| format!("read seed file {file}: {e}"))?;
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let f: Vec<&str> = line.splitn(5, '\t').collect();
                let [db, coll, id, pk, body] = f.as_slice() else {
                    return Err(format!("{file}:{}: expected DB, COLL, ID, PK, BODY separated by tabs", n + 1));
                };
                let (status, _, resp) = http("PUT", &doc_path(db, coll, id), Some(pk), None, body)?;
                if !(200..300).contains(&status) {
                    eprintln!("{file}:{}: HTTP {status} {resp}", n + 1);
                    return Ok(1);
                }
            }
            println!("seeded from {file}");
            Ok(0)
        }
        ["export"] => {
            let (status, _, resp) = http("GET", "/export", None, None, "")?;
            if status != 200 {
                eprintln!("docstore export: HTTP {status} {resp}");
                return Ok(1);
            }
            std::io::stdout().write_all(resp.as_bytes()).map_err(|e| format!("write the export: {e}"))?;
            Ok(0)
        }
        ["import"] => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map_err(|e| format!("read the import on stdin: {e}"))?;
            let mut count = 0;
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
                let f: Vec<String> = line.split('\t').map(unescape).collect();
                let [db, coll, id, pk, body] = f.as_slice() else {
                    return Err(format!("line {}: expected DB, COLL, ID, PK, BODY separated by tabs", n + 1));
                };
                let (status, _, resp) = http("PUT", &doc_path(db, coll, id), Some(pk), None, body)?;
                if !(200..300).contains(&status) {
                    eprintln!("line {}: HTTP {status} {resp}", n + 1);
                    return Ok(1);
                }
                count += 1;
            }
            println!("imported {count} documents");
            Ok(0)
        }
        _ => Err(
            "usage: docstore [serve] | put DB COLL ID PK BODY [IF_MATCH] | get DB COLL ID PK | seed FILE | export | import"
                .into(),
        ),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("docstore: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
