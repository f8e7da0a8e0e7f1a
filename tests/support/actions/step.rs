//! What a step leaves: its log (masked), its outputs, and the workflow
//! commands it printed, read the way the Actions runner reads them.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::Command;
use std::time::Duration;

/// One step of a job, as recorded.
#[derive(Debug, Clone)]
pub struct StepRecord {
    pub name: String,
    pub id: Option<String>,
    /// success, failure, skipped (before `continue-on-error`).
    pub outcome: String,
    /// success, failure, skipped (after `continue-on-error`).
    pub conclusion: String,
    /// stdout and stderr as one stream, secrets and masked values as `***`.
    pub log: String,
    pub outputs: BTreeMap<String, String>,
}

/// An `::error`, `::warning` or `::notice` annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    pub level: String,
    pub message: String,
    pub title: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// The runner's reading of a step's output.
#[derive(Debug, Default)]
pub struct Commands {
    pub masks: Vec<String>,
    pub annotations: Vec<Annotation>,
    /// `::set-output` (deprecated, still honoured with a warning).
    pub outputs: BTreeMap<String, String>,
    /// The token of `::stop-commands::`, while commands are off.
    stopped: Option<String>,
    /// Set when a disabled command (`set-env`, `add-path`) was used.
    pub failed: Option<String>,
}

fn unescape_data(s: &str) -> String {
    s.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")
}

fn unescape_property(s: &str) -> String {
    s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")
}

impl Commands {
    /// Reads `raw` line by line: workflow commands take effect in order,
    /// and the returned log has every mask applied.
    pub fn process(&mut self, raw: &str) -> String {
        let mut log = String::new();
        // The runner reads lines as .NET's ReadLine does: a CR alone ends one too.
        let raw = raw.replace("\r\n", "\n");
        let lines = raw.strip_suffix('\n').unwrap_or(&raw).split(['\n', '\r']).filter(|_| !raw.is_empty());
        for line in lines {
            let shown = self.line(line);
            if let Some(shown) = shown {
                log.push_str(&self.mask(&shown));
                log.push('\n');
            }
        }
        log
    }

    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_string();
        let mut masks: Vec<&String> = self.masks.iter().filter(|m| !m.trim().is_empty()).collect();
        masks.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in masks {
            out = out.replace(m.as_str(), "***");
        }
        out
    }

    /// One line: `Some(text)` to log, `None` when it was a command.
    fn line(&mut self, line: &str) -> Option<String> {
        let trimmed = line.trim_start();
        if let Some(token) = &self.stopped {
            if trimmed == format!("::{token}::") {
                self.stopped = None;
                return None;
            }
            return Some(line.to_string());
        }
        let Some(rest) = trimmed.strip_prefix("::") else { return Some(line.to_string()) };
        let Some(end) = rest.find("::") else { return Some(line.to_string()) };
        let (head, data) = (&rest[..end], &rest[end + 2..]);
        let (name, props) = match head.split_once(' ') {
            Some((n, p)) => (n, p),
            None => (head, ""),
        };
        let mut properties = BTreeMap::new();
        for pair in props.split(',').filter(|p| !p.trim().is_empty()) {
            if let Some((k, v)) = pair.split_once('=') {
                properties.insert(k.trim().to_string(), unescape_property(v));
            }
        }
        let data = unescape_data(data);
        match name {
            "error" | "warning" | "notice" => {
                self.annotations.push(Annotation {
                    level: name.into(),
                    message: self.mask(&data),
                    title: properties.get("title").map(|t| self.mask(t)),
                    file: properties.get("file").cloned(),
                    line: properties.get("line").and_then(|l| l.parse().ok()),
                });
                Some(format!("{}: {}", name, self.mask(&data)))
            }
            "add-mask" => {
                self.masks.push(data);
                None
            }
            "stop-commands" => {
                self.stopped = Some(data);
                None
            }
            "set-output" => {
                if let Some(n) = properties.get("name") {
                    self.outputs.insert(n.clone(), data);
                }
                self.annotations.push(Annotation {
                    level: "warning".into(),
                    message: "The `set-output` command is deprecated and will be disabled soon. Please upgrade to using Environment Files.".into(),
                    title: None,
                    file: None,
                    line: None,
                });
                None
            }
            "set-env" | "add-path" => {
                let why = format!(
                    "Unable to process command '{line}' successfully. The `{name}` command is disabled. Please upgrade to using Environment Files or opt into unsecure command execution by setting the `ACTIONS_ALLOW_UNSECURE_COMMANDS` environment variable to `true`."
                );
                self.annotations.push(Annotation {
                    level: "error".into(),
                    message: why.clone(),
                    title: None,
                    file: None,
                    line: None,
                });
                self.failed = Some(why);
                None
            }
            "debug" | "group" | "endgroup" | "echo" | "save-state" => None,
            _ => Some(line.to_string()),
        }
    }
}

/// `GITHUB_OUTPUT` / `GITHUB_ENV` files: `name=value` lines, or
/// `name<<DELIMITER` ... `DELIMITER` for several lines.
pub fn parse_file_commands(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some((name, delimiter)) = line.split_once("<<")
            && !name.contains('=')
        {
            let mut value = Vec::new();
            loop {
                match lines.next() {
                    Some(l) if l == delimiter => break,
                    Some(l) => value.push(l),
                    None => return Err(format!("Matching delimiter not found '{delimiter}'")),
                }
            }
            out.push((name.to_string(), value.join("\n")));
        } else if let Some((name, value)) = line.split_once('=') {
            out.push((name.to_string(), value.to_string()));
        } else {
            return Err(format!("Invalid format '{line}'"));
        }
    }
    Ok(out)
}

/// Runs a process with stdout and stderr as one stream, as the runner
/// shows them; gives up after `limit` of real time.
pub fn run_process(mut cmd: Command, limit: Duration) -> (i32, String) {
    use std::os::unix::process::CommandExt as _;
    let (mut reader, writer) = std::io::pipe().expect("a pipe");
    // Its own process group, so a timeout ends whatever it started too.
    cmd.process_group(0);
    cmd.stdin(std::process::Stdio::null()).stdout(writer.try_clone().expect("a pipe")).stderr(writer);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (127, format!("could not start {:?}: {e}\n", cmd.get_program())),
    };
    // The parent's copies of the pipe's writing end go with `cmd`.
    drop(cmd);
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < limit {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: kill(2) of the step's own process group (its id is the
            // child's, not reaped yet); nothing else is in that group.
            unsafe {
                libc::kill(-(pid as i32), libc::SIGKILL);
            }
            true
        })
    };
    let mut bytes = Vec::new();
    let _ = reader.read_to_end(&mut bytes);
    let status = child.wait().expect("the step's process is waited for");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let killed = watchdog.join().unwrap_or(false);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if killed {
        text.push_str(&format!("\nthe test runner killed the step after {} of real time\n", humantime(limit)));
    }
    (status.code().unwrap_or(-1), text)
}

fn humantime(d: Duration) -> String {
    format!("{}s", d.as_secs())
}
