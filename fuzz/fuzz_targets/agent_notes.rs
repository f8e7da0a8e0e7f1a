//! The agent-notes reader: the `$WARD_NOTES` file a (hostile) agent wrote.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ward::chart::Sentinels;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Sentinels::default().parse_agent_notes(text);
    }
});
