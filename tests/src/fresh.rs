//! Whether a built binary is as new as its sources: cargo writes a dep-info
//! file beside each binary (`target/<profile>/<name>.d`) listing every source
//! file it was compiled from; a binary older than one of those under the
//! workspace, or built from another checkout's files, is stale.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

/// [`stale`] for `bin`, remembered for the life of the process (the suite
/// asks for the same binaries thousands of times).
pub fn checked(bin: &Path, dep_info: &Path, root: &Path) -> Result<(), String> {
    static SEEN: OnceLock<Mutex<BTreeMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut seen = seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    seen.entry(bin.to_path_buf())
        .or_insert_with(|| stale(bin, dep_info, root))
        .clone()
}

/// `Ok` when the binary at `bin` is at least as new as every source file its
/// `dep_info` lists under `root`; else why not. A binary without dep-info
/// (copied in by hand) cannot be judged and passes.
pub fn stale(bin: &Path, dep_info: &Path, root: &Path) -> Result<(), String> {
    let Ok(text) = std::fs::read_to_string(dep_info) else {
        return Ok(());
    };
    let built = modified(bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let sources = sources(&text);
    let ours: Vec<&PathBuf> = sources.iter().filter(|s| s.starts_with(root)).collect();
    if ours.is_empty()
        && let Some(other) = sources.first()
    {
        return Err(format!(
            "{} was built from sources outside {} (such as {})",
            bin.display(),
            root.display(),
            other.display()
        ));
    }
    for source in ours {
        match modified(source) {
            Ok(changed) if changed <= built => {}
            Ok(_) => {
                return Err(format!(
                    "{} is older than {}, changed since it was built",
                    bin.display(),
                    source.display()
                ));
            }
            Err(_) => {
                return Err(format!(
                    "{} was built from {}, which is gone",
                    bin.display(),
                    source.display()
                ));
            }
        }
    }
    Ok(())
}

fn modified(path: &Path) -> std::io::Result<SystemTime> {
    std::fs::metadata(path)?.modified()
}

/// The files of a make-style dep-info's first rule (`target: dep dep …`),
/// with `\ ` as an escaped space.
fn sources(text: &str) -> Vec<PathBuf> {
    let Some(first) = text.lines().next() else {
        return Vec::new();
    };
    let Some((_, deps)) = first.split_once(": ") else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(' ') => current.push(' '),
                Some(other) => {
                    current.push('\\');
                    current.push(other);
                }
                None => current.push('\\'),
            },
            ' ' => {
                if !current.is_empty() {
                    files.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() {
        files.push(PathBuf::from(current));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Duration;

    /// A workspace with one source file and a binary built from it at
    /// `built`, the source last changed at `changed`.
    fn built_at(built: u64, changed: u64) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("my work");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let source = root.join("src/main.rs");
        std::fs::write(&source, "fn main() {}\n").unwrap();
        let bin = dir.path().join("mc-x");
        std::fs::write(&bin, "binary").unwrap();
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        File::options()
            .write(true)
            .open(&bin)
            .unwrap()
            .set_modified(at(built))
            .unwrap();
        File::options()
            .write(true)
            .open(&source)
            .unwrap()
            .set_modified(at(changed))
            .unwrap();
        let escaped = |p: &Path| p.display().to_string().replace(' ', "\\ ");
        let dep_info = dir.path().join("mc-x.d");
        std::fs::write(
            &dep_info,
            format!(
                "{}: {} /elsewhere/registry/lib.rs\n\n{}:\n",
                bin.display(),
                escaped(&source),
                escaped(&source)
            ),
        )
        .unwrap();
        (dir, root, bin, dep_info)
    }

    #[test]
    fn a_binary_newer_than_its_sources_passes() {
        let (_dir, root, bin, dep_info) = built_at(2_000, 1_000);
        assert_eq!(stale(&bin, &dep_info, &root), Ok(()));
    }

    #[test]
    fn a_binary_older_than_a_source_it_was_built_from_is_refused_by_name() {
        let (_dir, root, bin, dep_info) = built_at(1_000, 2_000);
        let why = stale(&bin, &dep_info, &root).unwrap_err();
        assert!(why.contains("is older than"), "{why}");
        assert!(why.contains("my work/src/main.rs"), "{why}");
    }

    #[test]
    fn a_binary_built_from_another_checkout_is_refused() {
        let (dir, _root, bin, dep_info) = built_at(2_000, 1_000);
        let why = stale(&bin, &dep_info, &dir.path().join("other")).unwrap_err();
        assert!(why.contains("outside"), "{why}");
    }

    #[test]
    fn a_binary_whose_source_is_gone_is_refused() {
        let (_dir, root, bin, dep_info) = built_at(2_000, 1_000);
        std::fs::remove_file(root.join("src/main.rs")).unwrap();
        let why = stale(&bin, &dep_info, &root).unwrap_err();
        assert!(why.contains("gone"), "{why}");
    }
}
