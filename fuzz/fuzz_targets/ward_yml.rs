//! `.github/ward.yml`: the YAML parse, mode and agent resolution, and the
//! semantic validation (`Config::parse` does all three).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ward::config::Config::parse(text, Path::new(".github/ward.yml"), None);
    }
});
