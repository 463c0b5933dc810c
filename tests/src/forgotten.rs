//! (tests only) The forgotten-module guard: every `.rs` file under a
//! package's `src/` or `tests/` folder is compiled, because a target starts
//! at it (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, `tests/*.rs`,
//! `tests/<dir>/main.rs`) or a `mod name;` of a reached file leads to it. A
//! file nothing reaches is never built and its tests never run, silently.
//!
//! Modules are followed as rustc does for `mod name;` at a file's top level:
//! beside a `lib.rs`/`main.rs`/`mod.rs`, in a folder named after any other
//! file, and at `#[path = "…"]` (from the declaring file's folder). A
//! `mod name;` inside an inline module is not followed.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `root` that no target of its package reaches.
pub fn unreached(root: &Path) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    for package in packages(root) {
        let mut files = BTreeSet::new();
        for folder in ["src", "tests", "benches", "examples"] {
            rs_files(&package.join(folder), &mut files);
        }
        let reached = reached_from(&targets(&package));
        missing.extend(files.into_iter().filter(|file| !reached.contains(file)));
    }
    missing.sort();
    missing
}

/// The folders under `root` holding a package's `Cargo.toml`, but for build output,
/// npm folders and test data.
fn packages(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut queue = VecDeque::from([root.to_path_buf()]);
    while let Some(dir) = queue.pop_front() {
        if is_package(&dir) {
            found.push(dir.clone());
        }
        for entry in sorted_entries(&dir) {
            let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let skipped = name.starts_with('.')
                || matches!(name, "target" | "node_modules" | "testdata" | "e2e");
            if entry.is_dir() && !entry.is_symlink() && !skipped {
                queue.push_back(entry);
            }
        }
    }
    found
}

/// A folder whose `Cargo.toml` declares a package (not only a workspace).
fn is_package(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|manifest| manifest.lines().any(|line| line.trim() == "[package]"))
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    entries.sort();
    entries
}

fn rs_files(dir: &Path, into: &mut BTreeSet<PathBuf>) {
    for entry in sorted_entries(dir) {
        if entry.is_symlink() {
            continue;
        }
        if entry.is_dir() {
            // A package inside a folder is its own.
            if !is_package(&entry) {
                rs_files(&entry, into);
            }
        } else if entry.extension().is_some_and(|ext| ext == "rs") {
            into.insert(entry);
        }
    }
}

/// The files cargo starts a target at, as it discovers them.
fn targets(package: &Path) -> Vec<PathBuf> {
    let mut roots = vec![
        package.join("src/lib.rs"),
        package.join("src/main.rs"),
        package.join("build.rs"),
    ];
    for folder in ["src/bin", "tests", "benches", "examples"] {
        for entry in sorted_entries(&package.join(folder)) {
            if entry.is_dir() {
                roots.push(entry.join("main.rs"));
            } else {
                roots.push(entry);
            }
        }
    }
    roots.retain(|root| root.is_file() && root.extension().is_some_and(|ext| ext == "rs"));
    roots
}

/// Every file reached from `roots` through `mod name;` declarations.
fn reached_from(roots: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut reached = BTreeSet::new();
    let mut queue: VecDeque<PathBuf> = roots.iter().cloned().collect();
    while let Some(file) = queue.pop_front() {
        if !reached.insert(file.clone()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (name, path) in declared(&text) {
            let child = match path {
                Some(path) => file.parent().map(|dir| dir.join(path)),
                None => children_dir(&file, roots).map(|dir| {
                    let flat = dir.join(format!("{name}.rs"));
                    if flat.is_file() {
                        flat
                    } else {
                        dir.join(&name).join("mod.rs")
                    }
                }),
            };
            if let Some(child) = child.filter(|child| child.is_file()) {
                queue.push_back(child);
            }
        }
    }
    reached
}

/// Where the modules a file declares live: its own folder for `lib.rs`,
/// `main.rs` and `mod.rs` (and a target's root), else a folder named after it.
fn children_dir(file: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    let dir = file.parent()?;
    let stem = file.file_stem()?.to_str()?;
    let is_root = matches!(stem, "lib" | "main" | "mod") || roots.iter().any(|root| root == file);
    Some(if is_root {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    })
}

/// The `mod name;` declarations at the top level of a file's text, each with
/// the `#[path = "…"]` just before it, if any.
fn declared(text: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut path = None;
    let mut depth = 0usize;
    for line in text.lines() {
        let trimmed = line.trim();
        if depth == 0 {
            if let Some(rest) = trimmed.strip_prefix("#[path") {
                path = rest.split('"').nth(1).map(str::to_string);
            } else if let Some(name) = mod_declaration(trimmed) {
                found.push((name, path.take()));
            } else if !trimmed.starts_with("#[") && !trimmed.is_empty() {
                path = None;
            }
        }
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    found
}

/// `name` of a line `[pub[(…)]] mod name;`.
fn mod_declaration(line: &str) -> Option<String> {
    let rest = line.strip_prefix("pub").map_or(line, |rest| {
        let rest = rest.trim_start();
        match rest.strip_prefix('(') {
            Some(inner) => inner.split_once(')').map_or(rest, |(_, after)| after),
            None => rest,
        }
    });
    let name = rest.trim_start().strip_prefix("mod ")?.trim();
    let name = name.strip_suffix(';')?.trim();
    let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    valid.then(|| name.strip_prefix("r#").unwrap_or(name).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rust_file_in_the_workspace_is_reached_by_a_target() {
        let missing = unreached(crate::workspace_root());
        assert!(
            missing.is_empty(),
            "these files are reached by no `mod` and no target, so they are never \
             compiled: declare each in its parent module (or delete it): {missing:#?}"
        );
    }

    #[test]
    fn a_file_no_mod_names_is_reported_by_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("Cargo.toml", "[package]\nname = \"x\"\n");
        write(
            "src/lib.rs",
            "pub mod a;\n#[cfg(test)]\nmod b;\nmod tests;\nmod inline {\n    fn f() {}\n}\n",
        );
        write("src/a.rs", "pub(crate) mod deep;\n");
        write("src/a/deep.rs", "");
        write("src/b.rs", "#[path = \"other/place.rs\"]\nmod moved;\n");
        write("src/other/place.rs", "");
        write("src/tests.rs", "mod cases;\n");
        write("src/tests/cases.rs", "");
        write("src/tests/cases/unreached.rs", "");
        write("src/bin/tool.rs", "mod helper;\n");
        write("src/bin/helper.rs", "");
        write("tests/suite/main.rs", "mod one;\n");
        write("tests/suite/one.rs", "");
        write("tests/suite/forgotten.rs", "");
        write("src/lonely.rs", "");
        write("testdata/sample.rs", "");
        write("src/inner/Cargo.toml", "[package]\nname = \"inner\"\n");
        write("src/inner/src/lib.rs", "");
        write("src/inner/src/alone.rs", "");
        let missing = unreached(dir.path());
        assert_eq!(
            missing,
            vec![
                dir.path().join("src/inner/src/alone.rs"),
                dir.path().join("src/lonely.rs"),
                dir.path().join("src/tests/cases/unreached.rs"),
                dir.path().join("tests/suite/forgotten.rs"),
            ]
        );
    }
}
