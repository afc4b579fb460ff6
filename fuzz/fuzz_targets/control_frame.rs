//! Control-socket bytes: length-prefixed frames through the server's and the client's checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentprism::fuzzing::control_frame(data));
