//! Helpers shared by the integration tests. Each test binary uses a part.
#![allow(dead_code)]

pub mod workspace;
