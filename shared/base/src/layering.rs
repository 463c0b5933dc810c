//! The module layering inside mc-base, checked: no cycle between its
//! top-level modules, and the domain depends on nothing above it. Between
//! crates Cargo enforces the layering; inside one crate it cannot, so this
//! reads the sources (non-test code only): a new `use` that breaks it fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What the shared domain may build on.
const DOMAIN_MAY_USE: &[&str] = &["codec", "error", "json", "tokens"];

fn rust_files(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Top-level module → the top-level modules its non-test code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "lib" && name != "layering" && name != "testkit" {
            modules.insert(name, path);
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (name, path) in &modules {
        let mut files = Vec::new();
        rust_files(path, &mut files);
        let mut uses = BTreeSet::new();
        for file in files {
            let stem = file.file_stem().unwrap().to_string_lossy();
            if stem.starts_with("tests") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            // Test modules sit at the end of a file.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let target: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if names.contains(&target) && &target != name {
                    uses.insert(target);
                }
            }
        }
        graph.insert(name.clone(), uses);
    }
    graph
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = graph();
    assert!(graph.contains_key("domain") && graph.contains_key("store"));
    // Peel off modules whose dependencies are all peeled; what stays is a cycle.
    let mut left = graph.clone();
    loop {
        let ready: Vec<String> = left
            .iter()
            .filter(|(_, uses)| uses.iter().all(|u| !left.contains_key(u)))
            .map(|(name, _)| name.clone())
            .collect();
        if ready.is_empty() {
            break;
        }
        for name in ready {
            left.remove(&name);
        }
    }
    assert!(left.is_empty(), "modules in a dependency cycle: {left:?}");
}

#[test]
fn the_domain_depends_on_nothing_above_it() {
    let graph = graph();
    let above: Vec<&String> = graph["domain"]
        .iter()
        .filter(|m| !DOMAIN_MAY_USE.contains(&m.as_str()))
        .collect();
    assert!(above.is_empty(), "domain uses {above:?}");
}
