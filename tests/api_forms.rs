//! Every call of the store client has each of its forms: a public method of the async
//! `store::Client` that takes `&self` and returns a future is a call; each call must have a
//! blocking form (`BlockingClient`), a C form (`yuebing_store_X` and `yuebing_store_X_async`
//! in `include/yuebing.h`) and a Python form (a `Store` method in the binding and in
//! `_native.pyi`). A call whose options carry a `Write` value also has its upsert name at the
//! Python edge (Mooncake's Python API names them); at the C edge upsert is the
//! `YUEBING_OPT_UPSERT` bit of the options every put form takes, so the header must define
//! it. The forms are read from the sources, so a call added without its forms fails here.

use std::collections::BTreeSet;
use std::path::Path;

/// The calls whose options choose put or upsert (`Options::write`): the Python edge also
/// names their upsert form (`put` → `upsert`, `batch_put_from` → `batch_upsert_from`); the C
/// edge takes `YUEBING_OPT_UPSERT` in their options instead.
const WRITES: &[&str] = &[
    "put",
    "put_parts",
    "put_from",
    "batch_put",
    "batch_put_from",
    "batch_put_from_buffers",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    Blocking,
    C,
    Python,
}

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `.rs` file of the directory `path`, one after another.
fn read_dir(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The `pub fn`s inside `impl <ty> {` blocks of `src` (a block starts at a line `impl <ty> {`
/// and ends at the next line `}`), each as (name, signature up to `{`, whole text up to its
/// closing `    }`).
fn methods(src: &str, ty: &str) -> Vec<(String, String, String)> {
    let (mut inside, mut out) = (false, Vec::new());
    let lines: Vec<&str> = src.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("impl ") && line.ends_with(&format!(" {ty} {{"))
            || *line == format!("impl {ty} {{")
        {
            inside = true;
        } else if *line == "}" {
            inside = false;
        } else if inside {
            let t = line.trim_start();
            let Some(rest) = t
                .strip_prefix("pub fn ")
                .or_else(|| t.strip_prefix("pub async fn "))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let sig: String = lines[i..]
                .iter()
                .take_while(|l| !l.trim_end().ends_with('{'))
                .chain(lines[i..].iter().find(|l| l.trim_end().ends_with('{')))
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ");
            let body = lines[i..]
                .iter()
                .take_while(|l| **l != "    }")
                .copied()
                .collect::<Vec<_>>()
                .join("\n");
            out.push((name, sig, body));
        }
    }
    out
}

/// The store client's calls: methods on `&self` that return a future, in any file of the
/// client's module (a call added in a new file is found too).
fn client_calls() -> BTreeSet<String> {
    let mut calls = BTreeSet::new();
    for (name, sig, _) in methods(&read_dir("store/src/client"), "Client") {
        if sig.contains("&self") && (sig.contains("impl Future") || sig.contains("async fn")) {
            calls.insert(name);
        }
    }
    calls
}

/// Which forms each edge has, as the names it calls them by.
fn forms(edge: Edge) -> BTreeSet<String> {
    match edge {
        Edge::Blocking => methods(&read("bridge/src/store.rs"), "BlockingClient")
            .into_iter()
            .map(|(name, _, _)| name)
            .collect(),
        Edge::C => {
            let header = read("include/yuebing.h");
            let names: BTreeSet<String> = header
                .split("yuebing_store_")
                .skip(1)
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect();
            // A call's C form is the blocking function and its `_async` twin.
            names
                .iter()
                .filter(|n| names.contains(&format!("{n}_async")))
                .cloned()
                .collect()
        }
        Edge::Python => {
            let stub = read("python/yuebing/_native.pyi");
            let class = stub
                .split("\nclass Store")
                .nth(1)
                .expect("_native.pyi has class Store");
            let class = class.split("\nclass ").next().unwrap_or(class);
            let stubbed: BTreeSet<String> = class
                .lines()
                .filter_map(|l| l.trim().strip_prefix("def "))
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect();
            // The `Store` class: its `#[pymethods]` blocks, one per group of calls.
            let binding = read_dir("python/src/store");
            let bound: BTreeSet<String> = binding
                .lines()
                .filter_map(|l| l.trim().strip_prefix("fn "))
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect()
                })
                .collect();
            stubbed.intersection(&bound).cloned().collect()
        }
    }
}

/// The names each edge must have: every call, and at the Python edge the upsert names of the
/// calls that write.
fn wanted(edge: Edge, calls: &BTreeSet<String>) -> BTreeSet<String> {
    let mut want = calls.clone();
    if edge == Edge::Python {
        want.extend(WRITES.iter().map(|w| w.replacen("put", "upsert", 1)));
    }
    want
}

#[test]
fn every_client_call_has_a_blocking_a_c_and_a_python_form() {
    let calls = client_calls();
    // The parse found the calls (a sanity check of the parser itself).
    for call in [
        "put",
        "get",
        "get_into",
        "batch_put_from",
        "batch_get_ranges",
        "batch_reserve",
        "mount_space",
        "remove_by_regex",
        "close",
        "health_check",
    ] {
        assert!(calls.contains(call), "{call} not found among {calls:?}");
    }
    for w in WRITES {
        assert!(calls.contains(*w), "WRITES names {w}, which is no call");
    }
    let mut missing = Vec::new();
    for edge in [Edge::Blocking, Edge::C, Edge::Python] {
        let have = forms(edge);
        for name in wanted(edge, &calls) {
            if !have.contains(&name) {
                missing.push(format!("{edge:?} {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "calls without a form: {missing:?}");
}

#[test]
fn the_c_edge_upserts_by_an_option_flag() {
    let header = read("include/yuebing.h");
    assert!(
        header
            .lines()
            .any(|l| l.starts_with("#define YUEBING_OPT_UPSERT ")),
        "include/yuebing.h does not define YUEBING_OPT_UPSERT, the C edge's upsert"
    );
}

#[test]
fn the_blocking_client_is_one_line_per_call() {
    let src = read("bridge/src/store.rs");
    let calls = client_calls();
    for (name, _, body) in methods(&src, "BlockingClient") {
        if !calls.contains(&name) {
            continue;
        }
        assert!(
            body.contains(&format!("self.client.{name}(")),
            "BlockingClient::{name} does not call Client::{name}"
        );
        assert!(!body.contains("match "), "BlockingClient::{name} branches");
        let code_lines = body
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .count();
        // The signature (one line, or one per argument as rustfmt wraps it) and one statement.
        assert!(
            code_lines <= 10,
            "BlockingClient::{name} is {code_lines} lines"
        );
    }
}
