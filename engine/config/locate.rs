//! Where a value sits in `ward.yml`, for errors a person can jump to.

/// Finds the line and column of a dotted path (`stages.treat.outcomes.stuck`)
/// in block-style YAML by following indentation. Good enough for the
/// hand-written files ward reads; falls back to the deepest key found.
pub fn locate(text: &str, path: &str) -> (usize, usize) {
    let mut best = (1, 1);
    let mut parent_indent: Option<usize> = None;
    let mut start = 0;
    let lines: Vec<&str> = text.lines().collect();
    'segments: for segment in path.split('.') {
        let mut i = start;
        while i < lines.len() {
            let line = lines[i];
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                i += 1;
                continue;
            }
            if parent_indent.is_some_and(|pi| indent <= pi) && i > start {
                break;
            }
            let key = trimmed.trim_start_matches("- ");
            let matches_key = key
                .strip_prefix(segment)
                .or_else(|| key.strip_prefix(&format!("\"{segment}\"")))
                .or_else(|| key.strip_prefix(&format!("'{segment}'")))
                .is_some_and(|rest| rest.trim_start().starts_with(':'));
            // A list index: the n-th `- ` item under the parent.
            let is_index = segment.parse::<usize>().ok();
            // A path starts at the top level: `discharge.x` is not `stages.discharge.x`.
            if matches_key && (parent_indent.is_some() || indent == 0) {
                best = (i + 1, indent + 1);
                parent_indent = Some(indent);
                start = i + 1;
                continue 'segments;
            }
            if let Some(n) = is_index {
                let mut count = 0;
                let mut j = start;
                while j < lines.len() {
                    let l = lines[j];
                    let t = l.trim_start();
                    let ind = l.len() - t.len();
                    if !t.is_empty() && parent_indent.is_some_and(|pi| ind <= pi) && !t.starts_with('-') {
                        break;
                    }
                    if t.starts_with("- ") || t == "-" {
                        if count == n {
                            best = (j + 1, ind + 1);
                            start = j + 1;
                            parent_indent = Some(ind);
                            continue 'segments;
                        }
                        count += 1;
                    }
                    // Flow list on the parent line: `[a, b]`.
                    j += 1;
                }
                break 'segments;
            }
            i += 1;
        }
        break;
    }
    best
}
