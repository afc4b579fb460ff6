//! An agent's ACP byte stream: the line reader under a small limit, then a live connection.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentprism::fuzzing::acp_reader(data));
