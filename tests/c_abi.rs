//! The C ABI from C: the examples in `examples/c/` compiled with the system C compiler against
//! the committed header and the cdylib cargo built for these tests, run against real
//! `yuebing master` and `yuebing node` processes, and again under valgrind's memcheck (no
//! invalid access, no definite leak).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Process;

/// Where cargo put the cdylib of yuebing-bridge for this build: next to the test binary.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().expect("a directory").to_path_buf();
    assert!(
        dir.join("libyuebing_bridge.so").exists(),
        "libyuebing_bridge.so not found in {}",
        dir.display()
    );
    dir
}

/// Compiles `examples/c/NAME.c` into `out` with warnings as errors.
fn compile(name: &str, out: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let exe = out.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-g",
            "-I",
        ])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join("examples/c").join(format!("{name}.c")))
        .arg(format!("-L{}", lib.display()))
        .arg("-lyuebing_bridge")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(status.success(), "{cc} could not build examples/c/{name}.c");
    exe
}

/// Runs `exe ARGS` (under valgrind when `memcheck`) and checks it succeeds with `expect` on
/// stdout.
fn run(exe: &Path, args: &[String], memcheck: bool, expect: &str) {
    let mut cmd = match memcheck {
        true => {
            let mut c = Command::new("valgrind");
            c.args([
                "-q",
                "--error-exitcode=97",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite",
            ])
            .arg(exe);
            c
        }
        false => Command::new(exe),
    };
    // The library is found through the rpath compile() set; cargo's LD_LIBRARY_PATH (which
    // names target/debug, where an older `cargo build` may have left another copy) would win
    // over it.
    let out = cmd
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (the test script installs valgrind)", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(expect),
        "{} {args:?} (memcheck: {memcheck}) failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        exe.display(),
        out.status
    );
}

#[test]
fn the_c_store_example_runs_against_a_master_and_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("store", dir.path());
    let master = Process::master(0, &[]);
    let ep = master.endpoint();
    let _node = Process::node(&ep, "32M");
    let args = [ep.to_string()];
    run(&exe, &args, false, "c store example: ok");
    run(&exe, &args, true, "c store example: ok");
}

#[test]
fn the_c_engine_example_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("engine", dir.path());
    run(&exe, &[], false, "c engine example: ok");
    run(&exe, &[], true, "c engine example: ok");
}
