//! The scripted mock ACP agent used by the tests (acp.md section 5).
fn main() {}
