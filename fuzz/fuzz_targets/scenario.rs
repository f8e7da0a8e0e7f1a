//! A `ward simulate` scenario. `load_scenario` reads a file, so each input
//! is written to one scratch file of this process first.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| std::env::temp_dir().join(format!("ward-fuzz-scenario-{}.yaml", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(scratch(), data).expect("write the scratch scenario");
    let _ = ward::simulate::load_scenario(scratch());
});
