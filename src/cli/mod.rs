//! Subcommands of the `yuebing` tool that live in the library (so tests and the bench can reuse
//! their settings resolution).

pub mod master;
