//! The chart reader: a chart as read back from the charts branch (anyone
//! with write access to it can put any text there).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ward::chart::Sentinels;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Sentinels::default().parse_chart(text);
    }
});
