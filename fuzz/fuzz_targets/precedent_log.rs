//! The precedent log (`precedents/log.yaml`): parsed, each entry checked,
//! indexed, then searched with the input's own text.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(log) = ward::precedent::PrecedentLog::parse(text, Path::new("precedents/log.yaml")) {
            let _ = log.search(text, 5);
        }
    }
});
