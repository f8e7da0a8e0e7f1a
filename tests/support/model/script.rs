//! What the scripted model does, and where each conversation is in it.
//!
//! A [`Script`] is a list of [`Scene`]s. A conversation (one agent run)
//! takes the first scene whose `matches` is in its user text and that no
//! earlier conversation took; each response then plays that scene's next
//! [`Turn`]. The cursor lives here, on the server, never in the request:
//! the CLIs add example exchanges and side requests of their own (aider's
//! few-shot messages, Claude Code's titles), so counting the assistant
//! messages a request carries would miscount.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// The model's part in a test.
#[derive(Clone, Debug, Default)]
pub struct Script {
    pub scenes: Vec<Scene>,
    /// Every request is answered with this fault (a rejected key: 401 for
    /// everything, codex's WebSocket attempt included), before any scene
    /// is looked at.
    pub always: Option<Fault>,
}

impl Script {
    pub fn new(scenes: Vec<Scene>) -> Self {
        Self { scenes, always: None }
    }

    /// A script that answers every request with `fault`.
    pub fn always(fault: Fault) -> Self {
        Self { scenes: Vec::new(), always: Some(fault) }
    }
}

/// One conversation's part: the turns it plays, in order.
#[derive(Clone, Debug)]
pub struct Scene {
    /// A substring of the conversation's user text (every user message's
    /// text, the CLI's own context included) that selects this scene.
    pub matches: String,
    pub turns: Vec<Turn>,
    /// Sent with every response of this scene.
    pub usage: Usage,
    /// `{{name}}` in a turn's text becomes the first group of `pattern`
    /// in the conversation's user text (what the prompt told the agent: a
    /// path, a commit), as a model would read it there.
    pub captures: Vec<(String, regex::Regex)>,
}

impl Scene {
    pub fn new(matches: &str, turns: Vec<Turn>) -> Self {
        Self { matches: matches.into(), turns, usage: Usage::default(), captures: Vec::new() }
    }

    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// `{{name}}` is read from the prompt by `pattern`'s first group.
    pub fn capture(mut self, name: &str, pattern: &str) -> Self {
        self.captures.push((name.into(), regex::Regex::new(pattern).expect("a valid capture pattern")));
        self
    }

    /// `turn` with every capture filled in from `user_text`.
    fn fill(&self, turn: &Turn, user_text: &str) -> Turn {
        if self.captures.is_empty() {
            return turn.clone();
        }
        let fill = |text: &str| {
            let mut out = text.to_string();
            for (name, pattern) in &self.captures {
                let value = pattern.captures(user_text).and_then(|c| c.get(1)).map_or("", |m| m.as_str());
                out = out.replace(&format!("{{{{{name}}}}}"), value);
            }
            out
        };
        match turn {
            Turn::Shell(c) => Turn::Shell(fill(c)),
            Turn::Write { path, content } => Turn::Write { path: fill(path), content: fill(content) },
            Turn::Edit { path, old, new } => Turn::Edit { path: fill(path), old: fill(old), new: fill(new) },
            Turn::Text(t) => Turn::Text(fill(t)),
            Turn::Fault(f) => Turn::Fault(f.clone()),
        }
    }
}

/// One step of the model. Paths may be absolute, or relative to the CLI's
/// working directory (read from Claude Code's system prompt; codex and
/// aider take them relative as they are).
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// Runs a shell command with the CLI's own shell tool.
    Shell(String),
    /// Creates or overwrites a file with the CLI's own edit tool. aider
    /// appends to a file that already exists (an empty SEARCH block).
    Write { path: String, content: String },
    /// Replaces the first `old` by `new` with the CLI's own edit tool.
    /// codex's patches and aider's SEARCH blocks are line-based: there
    /// `old` must be whole lines (a trailing newline is optional).
    Edit { path: String, old: String, new: String },
    /// Ends the turn with this text.
    Text(String),
    /// Answers this request with a fault; the step is consumed.
    Fault(Fault),
}

impl Turn {
    pub fn shell(command: &str) -> Self {
        Self::Shell(command.into())
    }

    pub fn write(path: &str, content: &str) -> Self {
        Self::Write { path: path.into(), content: content.into() }
    }

    pub fn edit(path: &str, old: &str, new: &str) -> Self {
        Self::Edit { path: path.into(), old: old.into(), new: new.into() }
    }

    pub fn text(text: &str) -> Self {
        Self::Text(text.into())
    }
}

/// A way for the model service to fail.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// This status with the API's own error body, and `retry-after`
    /// (seconds) when given.
    Status { code: u16, message: String, retry_after: Option<u64> },
    /// Accepts the request, sends 200 and its headers, then nothing until
    /// the client gives up.
    Hang,
    /// 200 with a body that is neither JSON nor server-sent events.
    Garbage,
}

impl Fault {
    pub fn status(code: u16, message: &str) -> Self {
        Self::Status { code, message: message.into(), retry_after: None }
    }

    pub fn retry_after(code: u16, message: &str, seconds: u64) -> Self {
        Self::Status { code, message: message.into(), retry_after: Some(seconds) }
    }
}

/// Tokens reported with one response, in Anthropic's sense: `input` is the
/// uncached input. The OpenAI APIs count cached tokens inside their input
/// figure, so they get `input + cache_read + cache_creation` there and
/// `cache_read` as `cached_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

impl Usage {
    /// The input figure of the OpenAI APIs (cached tokens included).
    pub fn openai_input(&self) -> u64 {
        self.input + self.cache_read + self.cache_creation
    }
}

/// What the server read from a request to know whose conversation it is.
pub(super) struct Identity {
    /// The CLI's own session id (Claude Code's `X-Claude-Code-Session-Id`,
    /// codex's `session-id`).
    pub session: Option<String>,
    /// Marks of the assistant replies the request carries in its history
    /// (tool call ids, reply texts): a reply this server sent names its
    /// conversation when the CLI sends no session id.
    pub replies: Vec<String>,
    /// Every user message's text, joined.
    pub user_text: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) enum Key {
    Session(String),
    /// A hash of the user text: a retried first request is the same
    /// conversation.
    Prompt(u64),
}

/// What a response plays.
pub(super) enum Step {
    /// `turns` (at least one) of scene `scene`, from its turn `first`.
    Turns { scene: usize, first: usize, turns: Vec<Turn>, usage: Usage },
    /// Past the scene's last turn: the model says "Done.".
    Done { scene: usize, usage: Usage },
    /// No scene matches this conversation.
    Unmatched,
}

#[derive(Default)]
struct Conversation {
    scene: Option<usize>,
    cursor: usize,
}

/// The script and every conversation's place in it.
pub(super) struct Book {
    script: Script,
    taken: Vec<bool>,
    conversations: HashMap<Key, Conversation>,
    replies: HashMap<String, Key>,
}

impl Book {
    pub fn new(script: Script) -> Self {
        let taken = vec![false; script.scenes.len()];
        Self { script, taken, conversations: HashMap::new(), replies: HashMap::new() }
    }

    pub fn always(&self) -> Option<&Fault> {
        self.script.always.as_ref()
    }

    pub fn key(&self, id: &Identity) -> Key {
        if let Some(session) = &id.session {
            return Key::Session(session.clone());
        }
        if let Some(key) = id.replies.iter().rev().find_map(|r| self.replies.get(r)) {
            return key.clone();
        }
        let mut h = DefaultHasher::new();
        id.user_text.hash(&mut h);
        Key::Prompt(h.finish())
    }

    /// Notes that a reply marked `mark` belongs to conversation `key`.
    pub fn remember(&mut self, mark: String, key: &Key) {
        self.replies.insert(mark, key.clone());
    }

    /// The next step of `key`'s conversation. `take` says how many of the
    /// remaining turns (never empty) one response plays; it is at least one.
    pub fn step(&mut self, key: &Key, user_text: &str, take: impl Fn(&[Turn]) -> usize) -> Step {
        let conversation = self.conversations.entry(key.clone()).or_default();
        if conversation.scene.is_none() {
            let scenes = &self.script.scenes;
            conversation.scene =
                (0..scenes.len()).find(|&i| !self.taken[i] && user_text.contains(scenes[i].matches.as_str()));
            if let Some(i) = conversation.scene {
                self.taken[i] = true;
            }
        }
        let Some(i) = conversation.scene else { return Step::Unmatched };
        let scene = &self.script.scenes[i];
        let rest = scene.turns.get(conversation.cursor..).unwrap_or_default();
        if rest.is_empty() {
            return Step::Done { scene: i, usage: scene.usage };
        }
        let first = conversation.cursor;
        let n = take(rest).clamp(1, rest.len());
        conversation.cursor += n;
        let turns = rest[..n].iter().map(|t| scene.fill(t, user_text)).collect();
        Step::Turns { scene: i, first, turns, usage: scene.usage }
    }
}
