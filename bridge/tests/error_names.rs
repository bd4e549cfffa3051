//! Every name a user sees for an error code is its row's in the crates' tables of codes
//! ([`yuebing_bridge::error::code_rows`]): the C header's `YUEBING_ERR_*` constants
//! (`include/yuebing.h`), the Python package's stubs and class tables
//! (`python/yuebing/errors.pyi`, `errors.py`), and the codes of the Mooncake drop-in
//! (`python/mooncake-compat/mooncake/_codes.py`), whose own names stay Mooncake's but must mean
//! what yuebing's code of the same number means.

use std::collections::BTreeMap;
use std::path::PathBuf;

use yuebing_bridge::error::{code_name, code_rows};
use yuebing_rpc::ErrorCode;

/// Header constants whose name is not their code's, kept for source compatibility: the name,
/// its code, and the name of that code. The code whose name would give the constant's name
/// (the store's `SegmentNotFound`, −101) has no constant.
const RENAMED: &[(&str, i32, &str)] = &[(
    "YUEBING_ERR_SEGMENT_NOT_FOUND",
    -3203,
    "EngineSegmentNotFound",
)];

fn read(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// `ObjectNotFound` → `OBJECT_NOT_FOUND`.
fn screaming(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The header constant of a code's name.
fn constant_of(name: &str) -> String {
    format!("YUEBING_ERR_{}", screaming(name))
}

fn rows() -> Vec<&'static ErrorCode> {
    code_rows().collect()
}

/// Every `#define YUEBING_ERR_* <int>` of the header.
fn header_constants() -> BTreeMap<String, i32> {
    read("include/yuebing.h")
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") {
                return None;
            }
            let name = words.next()?.strip_prefix("YUEBING_ERR_")?;
            Some((format!("YUEBING_ERR_{name}"), words.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_tables_give_each_code_one_name() {
    let rows = rows();
    let mut codes = std::collections::HashSet::new();
    let mut names = std::collections::HashSet::new();
    for row in &rows {
        assert!(codes.insert(row.code), "code {} twice", row.code);
        assert!(names.insert(row.name), "name {} twice", row.name);
        assert_eq!(code_name(row.code), row.name);
    }
    assert_eq!(
        code_name(-1501),
        "StoreTimeout",
        "the one name of a store timeout"
    );
    assert!(rows.len() >= 80, "{}", rows.len());
}

#[test]
fn every_code_has_the_c_constant_of_its_name() {
    let header = header_constants();
    for row in rows() {
        let constant = constant_of(row.name);
        if RENAMED.iter().any(|(c, ..)| *c == constant) {
            // That name is taken by an older constant (see RENAMED).
            continue;
        }
        assert_eq!(
            header.get(&constant),
            Some(&row.code),
            "include/yuebing.h lacks `#define {constant} {}` (bridge/src/ffi/error.rs)",
            row.code
        );
    }
}

#[test]
fn every_c_constant_is_the_code_of_its_name() {
    let header = header_constants();
    assert!(header.len() >= 80, "{}", header.len());
    for (constant, code) in &header {
        if let Some((_, old_code, name)) = RENAMED.iter().find(|(c, ..)| c == constant) {
            assert_eq!((code, code_name(*code)), (old_code, *name), "{constant}");
            continue;
        }
        let row = rows()
            .into_iter()
            .find(|r| constant_of(r.name) == *constant);
        let row = row.unwrap_or_else(|| panic!("{constant} names no code of the tables"));
        assert_eq!(
            row.code, *code,
            "{constant} is {code}, but {} is {}",
            row.name, row.code
        );
    }
    assert!(read("include/yuebing.h").contains("#define YUEBING_OK 0"));
}

/// Each `class Name(...):` of the stub with the code its docstring gives (`"""Code -704.`).
fn stub_classes() -> BTreeMap<String, Option<i32>> {
    let stub = read("python/yuebing/errors.pyi");
    let lines: Vec<&str> = stub.lines().collect();
    let mut out = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("class ") else {
            continue;
        };
        let name = rest.split(['(', ':']).next().unwrap().trim().to_string();
        let code = lines.get(i + 1).and_then(|doc| {
            let doc = doc.trim().strip_prefix("\"\"\"Code ")?;
            doc.split('.').next()?.parse().ok()
        });
        out.insert(name, code);
    }
    out
}

#[test]
fn the_python_stub_has_one_class_per_code_named_and_numbered_as_the_tables() {
    let mut classes = stub_classes();
    assert_eq!(classes.remove("YuebingError"), Some(None), "the base class");
    for row in rows() {
        assert_eq!(
            classes.remove(row.name),
            Some(Some(row.code)),
            "python/yuebing/errors.pyi: class {} with \"\"\"Code {}.",
            row.name,
            row.code
        );
    }
    assert!(classes.is_empty(), "classes of no code: {classes:?}");
}

#[test]
fn the_python_class_tables_name_only_codes_of_the_tables() {
    let source = read("python/yuebing/errors.py");
    let mut seen = 0;
    for table in ["_ALSO", "_PARENT", "_DOCS"] {
        let start = source.find(&format!("\n{table}: ")).expect(table);
        let body = &source[start..];
        let body = &body[..body.find("\n}\n").expect(table)];
        // Entries are `    "Name": value,` (continuation lines of a value hold no `":`).
        for line in body.lines().filter(|l| l.starts_with("    \"")) {
            let mut quoted = line.split('"').skip(1).step_by(2);
            let key = quoted.next().unwrap();
            if !line.contains(&format!("\"{key}\":")) {
                continue;
            }
            assert_ne!(
                code_name_of(key),
                None,
                "{table} names {key}, no code's name"
            );
            if table == "_PARENT" {
                let parent = quoted.next().unwrap();
                assert_ne!(code_name_of(parent), None, "_PARENT names {parent}");
            }
            seen += 1;
        }
    }
    assert!(seen > 10, "{seen}");
}

fn code_name_of(name: &str) -> Option<i32> {
    rows().into_iter().find(|r| r.name == name).map(|r| r.code)
}

/// The Mooncake drop-in's integer constants (`NAME = -704`).
fn mooncake_codes() -> Vec<(String, i32)> {
    read("python/mooncake-compat/mooncake/_codes.py")
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(" = ")?;
            let name = name.trim();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return None;
            }
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Mooncake's store codes whose name is not yuebing's code's in capitals.
const MOONCAKE_NAMED_OTHERWISE: &[(&str, &str)] = &[("INTERNAL_ERROR", "Internal")];

/// Mooncake's own failure codes, which yuebing's codes of other layers become: no code of
/// yuebing's may have their numbers (yuebing's store codes pass through unchanged).
const MOONCAKE_ONLY: &[&str] = &["TRANSFER_FAIL", "RPC_FAIL", "RPC_TIMEOUT"];

#[test]
fn the_mooncake_codes_mean_what_yuebings_codes_of_the_same_number_mean() {
    let codes = mooncake_codes();
    assert!(codes.len() >= 12, "{codes:?}");
    for (name, code) in &codes {
        if name == "OK" {
            assert_eq!(*code, 0);
        } else if MOONCAKE_ONLY.contains(&name.as_str()) {
            assert_eq!(
                code_name(*code),
                "Unknown",
                "{name} = {code} is a yuebing code"
            );
        } else if let Some(engine) = name.strip_prefix("ERR_") {
            // Transfer Engine codes: yuebing's engine code is −3000 plus Mooncake's.
            let ours = code_name(code - 3000);
            let ours = ours.strip_prefix("Engine").unwrap_or(ours);
            assert_eq!(
                screaming(ours),
                engine,
                "{name} = {code} vs yuebing {}",
                code - 3000
            );
        } else {
            let ours = code_name(*code);
            match MOONCAKE_NAMED_OTHERWISE.iter().find(|(n, _)| n == name) {
                Some((_, expected)) => assert_eq!(ours, *expected, "{name} = {code}"),
                None => assert_eq!(
                    screaming(ours),
                    *name,
                    "{name} = {code} is yuebing's {ours}"
                ),
            }
        }
    }
}
