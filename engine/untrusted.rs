//! Text from agents and issues: the limits it must stay within (sizes,
//! YAML nesting, excerpt lengths) and how ward shows it (control characters
//! escaped, no line able to start a GitHub workflow command). Pure; uses
//! nothing of ward's.

use std::borrow::Cow;

/// Cuts `text` to at most `max` bytes on a character boundary, saying so.
pub fn cut(text: &str, max: usize, what: &str) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}\n[... {} more bytes cut; {what}]", &text[..end], text.len() - end)
}

/// `text` in a code fence longer than any backtick run inside it, so the
/// text cannot close the fence. Also the template filter `fenced`.
pub fn fence(text: &str, info: &str) -> String {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let marks = "`".repeat((longest + 1).max(3));
    format!("{marks}{info}\n{text}\n{marks}")
}

/// The most one note may hold (its body, in bytes). Far above any honest
/// note; a chart of such notes still reads back through the contents API.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;
/// The most a chart may grow to. GitHub's contents API stops returning a
/// file's content above 1 MB; a chart stays well under it.
pub const MAX_CHART_BYTES: usize = 512 * 1024;
/// The part of [`MAX_CHART_BYTES`] kept for the engine's own notes: an
/// agent's notes that would eat into it are refused, and the refusal still
/// fits.
pub const ENGINE_RESERVE_BYTES: usize = 64 * 1024;
/// The deepest nesting a YAML document (a note's block, ward.yml) may have.
/// Honest ones stay under ten; libyaml's cost grows with the square of it.
pub const MAX_YAML_DEPTH: usize = 64;
/// An excerpt of an agent's output quoted in a REFUSAL: at most this many
/// lines, each cut to this many characters.
pub const EXCERPT_LINES: usize = 10;
pub const EXCERPT_LINE_CHARS: usize = 200;

/// `text` as ward prints it to a terminal or a workflow log: control
/// characters escaped ([`escape_controls`]) and no line able to start a
/// workflow command ([`no_workflow_commands`]).
pub fn shown(text: &str) -> String {
    no_workflow_commands(&escape_controls(text)).into_owned()
}

/// Control characters written as `\u{..}` escapes: C0 (but newline and
/// tab), DEL, C1 (ANSI escape sequences start with one of these), and the
/// bidirectional and invisible formatting characters that make text read
/// otherwise than it is (U+061C, U+200B..U+200F, U+202A..U+202E,
/// U+2060..U+2069, U+FEFF). A carriage return is escaped too: on a
/// terminal it rewrites the line, and the Actions runner starts a new line
/// at it.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape_controls`] for JSON text: as `\uXXXX` escapes, which JSON
/// reads back as the same characters (serde_json already escapes C0 and
/// leaves the rest as they are; they occur only inside strings).
pub fn escape_controls_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_hidden) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c if is_hidden(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn is_hidden(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if c.is_control() => true,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' => true,
        _ => false,
    }
}

/// Neutralises GitHub workflow commands: the runner reads a line (ended by
/// LF, CR or both) as a command when, after leading whitespace, it starts
/// with `::` (`::error`, `::add-mask::`, `::stop-commands::` ...), and
/// reads the older `##[command]` form anywhere in a line. A backslash is
/// put before such a `::` and between the two `#`: the text still reads
/// the same, and the runner takes nothing in it for a command.
pub fn no_workflow_commands(text: &str) -> Cow<'_, str> {
    let risky = text.contains("##[") || text.split(['\n', '\r']).any(|l| l.trim_start().starts_with("::"));
    if !risky {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive(['\n', '\r']) {
        let body = line.trim_start();
        let lead = &line[..line.len() - body.len()];
        out.push_str(lead);
        if body.starts_with("::") {
            out.push('\\');
        }
        out.push_str(&body.replace("##[", "#\\#["));
    }
    Cow::Owned(out)
}

/// The last [`EXCERPT_LINES`] lines of `text`, each cut to
/// [`EXCERPT_LINE_CHARS`] characters (a cut line ends with `…`), control
/// characters escaped: what a REFUSAL quotes of an agent's output.
pub fn excerpt(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(EXCERPT_LINES)..];
    let cut: Vec<String> = tail
        .iter()
        .map(|line| {
            let line = escape_controls(line);
            match line.char_indices().nth(EXCERPT_LINE_CHARS) {
                Some((at, _)) => format!("{}…", &line[..at]),
                None => line.into_owned(),
            }
        })
        .collect();
    cut.join("\n")
}

/// Fails when the YAML `text` nests deeper than `max`, in one pass and
/// before any parser sees it. The count errs on the generous side: every
/// deeper indentation, every `- ` or `? ` that opens a collection on a
/// line, and every open `[` or `{` outside quotes adds one. Block scalars
/// (`|`, `>`) are skipped, as are comments.
pub fn check_yaml_depth(text: &str, max: usize) -> Result<(), TooDeep> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut scalar_above: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let body = line.trim_start_matches(' ');
        let indent = line.len() - body.len();
        if let Some(above) = scalar_above {
            if body.trim().is_empty() || indent > above {
                continue;
            }
            scalar_above = None;
        }
        if body.trim().is_empty() || body.starts_with('#') {
            continue;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut depth = indents.len();
        let mut rest = body;
        while let Some(r) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
            depth += 1;
            rest = r.trim_start_matches(' ');
        }
        let (open, deepest) = flow_depth(rest, flow);
        flow = open;
        depth += deepest;
        if depth > max {
            return Err(TooDeep { line: i + 1, max });
        }
        let t = rest.trim_end();
        let t = t.split(" #").next().unwrap_or(t).trim_end();
        let last = t.rsplit(' ').next().unwrap_or_default();
        let indicator = last.trim_end_matches(['+', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
        if flow == 0 && (indicator == "|" || indicator == ">") {
            scalar_above = Some(indent);
        }
    }
    Ok(())
}

/// A YAML document nested deeper than allowed, at its 1-based `line`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the YAML nests deeper than {max} levels (line {line}); flatten it")]
pub struct TooDeep {
    pub line: usize,
    pub max: usize,
}

/// The flow depth after `line` starting at `flow`, and the deepest it got.
fn flow_depth(line: &str, mut flow: usize) -> (usize, usize) {
    let mut deepest = flow;
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if prev == ' ' => break,
            (None, '[' | '{') => {
                flow += 1;
                deepest = deepest.max(flow);
            }
            (None, ']' | '}') => flow = flow.saturating_sub(1),
            _ => {}
        }
        prev = c;
    }
    (flow, deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_line_of_untrusted_text_starts_a_workflow_command() {
        let hostile =
            "ok\n::stop-commands::tok\n  ::error::fake\r::add-mask::ward\n\t::warning file=a::x\nsay ##[error]no\n::";
        let out = no_workflow_commands(hostile);
        for line in out.split(['\n', '\r']) {
            assert!(!line.trim_start().starts_with("::"), "{line:?}");
            assert!(!line.contains("##["), "{line:?}");
        }
        assert_eq!(
            out,
            "ok\n\\::stop-commands::tok\n  \\::error::fake\r\\::add-mask::ward\n\t\\::warning file=a::x\nsay #\\#[error]no\n\\::"
        );
        // Unicode whitespace is whitespace to the runner too.
        assert_eq!(no_workflow_commands("\u{a0}\u{2003}::error::x"), "\u{a0}\u{2003}\\::error::x");
        assert!(matches!(no_workflow_commands("a :: b\nc::d"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        let text = "nul\0 esc\u{1b}[31mred csi\u{9b}x rlo\u{202e}txt zw\u{200b} bom\u{feff} cr\rline\ttab\nnext é";
        assert_eq!(
            escape_controls(text),
            "nul\\u{0} esc\\u{1b}[31mred csi\\u{9b}x rlo\\u{202e}txt zw\\u{200b} bom\\u{feff} cr\\u{d}line\ttab\nnext é"
        );
        assert_eq!(shown("\u{1b}]0;title\u{7}\n::error::x"), "\\u{1b}]0;title\\u{7}\n\\::error::x");
        let json = serde_json::to_string(&serde_json::json!({"body": "a\u{202e}b\u{1b}c"})).unwrap();
        let escaped = escape_controls_json(&json);
        assert_eq!(escaped, r#"{"body":"a\u202eb\u001bc"}"#);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&escaped).unwrap()["body"], "a\u{202e}b\u{1b}c");
    }

    #[test]
    fn an_excerpt_is_the_last_lines_each_cut() {
        let long = "x".repeat(10_000);
        let text = format!("{}\n{long}\nlast", (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join("\n"));
        let e = excerpt(&text);
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), EXCERPT_LINES);
        assert_eq!(lines[0], "22");
        assert_eq!(lines[EXCERPT_LINES - 2].chars().count(), EXCERPT_LINE_CHARS + 1);
        assert!(lines[EXCERPT_LINES - 2].ends_with('…'));
        assert_eq!(lines[EXCERPT_LINES - 1], "last");
        assert!(e.len() < EXCERPT_LINES * (EXCERPT_LINE_CHARS * 4 + 4));
    }

    #[test]
    fn yaml_nesting_is_bounded_in_every_form() {
        let honest = "- key: a\n  title: A\n  body: |\n    [[[[[[[[[[ not { yaml\n      - - - - -\n  depends_on: [b, \"[c\"]\n# [[[[\n";
        assert_eq!(check_yaml_depth(honest, 8), Ok(()));
        let flow = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let dashes = format!("{}x", "- ".repeat(100_000));
        let indented: String = (0..1_000).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        let mixed = "a:\n  - {b: [c, {d: [e, [f, [g]]]}]}\n";
        for text in [flow.as_str(), dashes.as_str(), indented.as_str()] {
            let err = check_yaml_depth(text, MAX_YAML_DEPTH).unwrap_err().to_string();
            assert!(err.contains("nests deeper than 64 levels (line "), "{err}");
        }
        assert!(check_yaml_depth(mixed, 5).is_err());
        assert_eq!(check_yaml_depth(mixed, 9), Ok(()));
    }
}
