//! Event payloads: `$GITHUB_EVENT_PATH` with `$GITHUB_EVENT_NAME`. The
//! first line of an input names the event (empty: ward infers it from the
//! payload's shape); the rest is the payload.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (name, payload) = text.split_once('\n').unwrap_or(("", text));
    let name = (!name.is_empty()).then_some(name);
    let _ = ward::event::parse_event(payload, name, Path::new("event.json"));
});
