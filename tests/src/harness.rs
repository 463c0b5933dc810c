//! The pinned real harnesses (`tests/e2e/package.json`) and the one rule every
//! runner follows when one is missing: outside CI the test is skipped with a
//! note on stderr; under CI (`CI` set), where `scripts/test` installs them,
//! the test fails.

use std::path::{Path, PathBuf};

/// One pinned harness binary.
#[derive(Debug, Clone, Copy)]
pub struct Pinned {
    /// The harness as a user names it ("OpenCode").
    pub name: &'static str,
    /// The binary in `tests/e2e/node_modules/.bin`.
    pub bin: &'static str,
    /// The variable that points at another build of it.
    pub var: &'static str,
}

pub const OPENCODE: Pinned = Pinned {
    name: "OpenCode",
    bin: "opencode",
    var: "MC_OPENCODE_BIN",
};
pub const CLAUDE_CODE: Pinned = Pinned {
    name: "Claude Code",
    bin: "claude",
    var: "MC_CLAUDE_BIN",
};
pub const CODEX: Pinned = Pinned {
    name: "Codex",
    bin: "codex",
    var: "MC_CODEX_BIN",
};
pub const PI: Pinned = Pinned {
    name: "Pi",
    bin: "pi",
    var: "MC_PI_BIN",
};

impl Pinned {
    /// Its path: the variable's value, else the one `npm install --prefix
    /// tests/e2e` put in `node_modules/.bin`; `None` when neither exists.
    pub fn path(&self) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(self.var) {
            return Some(PathBuf::from(path));
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("e2e/node_modules/.bin")
            .join(self.bin);
        path.exists().then_some(path)
    }

    /// Its path for `test`, or `None` with a note on stderr when it is not
    /// installed; under CI a missing harness panics.
    pub fn for_test(&self, test: &str) -> Option<PathBuf> {
        let ci = std::env::var_os("CI").is_some();
        match self.decide(self.path(), ci, test) {
            Ok(found) => found,
            Err(message) => panic!("{message}"),
        }
    }

    /// What a runner does with `found`: run it, skip (`Ok(None)`, the note
    /// printed) or fail under CI (`Err`, the message to fail with).
    pub fn decide(
        &self,
        found: Option<PathBuf>,
        ci: bool,
        test: &str,
    ) -> Result<Option<PathBuf>, String> {
        if found.is_some() {
            return Ok(found);
        }
        let install = "install it with scripts/test or `npm install --prefix tests/e2e`";
        if ci {
            return Err(format!(
                "the real {} is not installed at tests/e2e/node_modules/.bin/{}: CI must run \
                 {test}; {install}",
                self.name, self.bin
            ));
        }
        eprintln!(
            "skipping {test}: the real {} is not installed ({install})",
            self.name
        );
        Ok(None)
    }
}

/// Chromium for the dashboard's browser tests: `MC_CHROMIUM_BIN`, else
/// `chromium` on `PATH` (Debian's package, which `.ci/run` installs). The
/// same rule as the harnesses: skipped with a note outside CI, failed under CI.
pub fn chromium_for_test(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("MC_CHROMIUM_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|dir| dir.join("chromium"))
                .find(|p| p.is_file())
        });
    if found.is_some() {
        return found;
    }
    let install = "install Debian's chromium (apt-get install chromium) or set MC_CHROMIUM_BIN";
    if std::env::var_os("CI").is_some() {
        panic!("chromium is not installed: CI must run {test}; {install}");
    }
    eprintln!("skipping {test}: chromium is not installed ({install})");
    None
}

/// The running test's name: libtest names each test's thread after it.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_harness_is_skipped_outside_ci_and_fails_under_ci() {
        for harness in [OPENCODE, CLAUDE_CODE, CODEX, PI] {
            assert_eq!(harness.decide(None, false, "t"), Ok(None));
            let failure = harness.decide(None, true, "some_test").unwrap_err();
            assert!(failure.contains(harness.name), "{failure}");
            assert!(failure.contains("some_test"), "{failure}");
            assert!(
                failure.contains("npm install --prefix tests/e2e"),
                "{failure}"
            );
            let found = Some(PathBuf::from("/bin/true"));
            assert_eq!(harness.decide(found.clone(), true, "t"), Ok(found));
        }
    }

    #[test]
    fn the_current_test_is_named_after_its_thread() {
        assert!(
            current_test().ends_with("the_current_test_is_named_after_its_thread"),
            "{}",
            current_test()
        );
    }
}
