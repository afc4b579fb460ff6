//! MCP message bodies, one per line, through the server's parse, era resolution and dispatch.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentprism::fuzzing::mcp_request(data));
