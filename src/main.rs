//! The `yuebing` command-line tool.
fn main() {}
