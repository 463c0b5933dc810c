//! Which harness and session a command runs for, when neither flags nor the
//! hook input say: what the harness leaves in the environment of what it
//! starts (a `!` command, the agent's shell, an MCP server), where it keeps
//! its sessions, and what a Pi session file says of itself.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// What the harnesses put in the environment of the programs they start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionEnv {
    /// `CLAUDECODE=1`: run from inside Claude Code.
    pub claude_code: bool,
    /// `CLAUDE_CODE_SESSION_ID`.
    pub claude_session: Option<String>,
    /// `CODEX_SESSION_ID`, else `CODEX_THREAD_ID`.
    pub codex_session: Option<String>,
}

impl SessionEnv {
    /// This process's environment.
    pub fn from_env() -> SessionEnv {
        SessionEnv::from_lookup(|name| std::env::var(name).ok())
    }

    /// The environment as `lookup`; blank values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> SessionEnv {
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        SessionEnv {
            claude_code: var("CLAUDECODE").as_deref() == Some("1"),
            claude_session: var("CLAUDE_CODE_SESSION_ID"),
            codex_session: var("CODEX_SESSION_ID").or_else(|| var("CODEX_THREAD_ID")),
        }
    }

    /// The harness running this process, as it names itself in mc's
    /// `harness` fields (`claude-code`, `codex`); Claude Code first.
    pub fn harness(&self) -> Option<&'static str> {
        if self.claude_code {
            Some("claude-code")
        } else {
            self.codex_session.as_ref().map(|_| "codex")
        }
    }

    /// The session of `harness` (`claude-code`, `codex`) the environment names.
    pub fn session(&self, harness: &str) -> Option<String> {
        match harness {
            "claude-code" => self.claude_session.clone(),
            "codex" => self.codex_session.clone(),
            _ => None,
        }
    }
}

/// Where Claude Code and Codex keep their sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarnessHomes {
    /// `CLAUDE_CONFIG_DIR`, else `~/.claude`.
    pub claude: Option<PathBuf>,
    /// `CODEX_HOME`, else `~/.codex`.
    pub codex: Option<PathBuf>,
}

impl HarnessHomes {
    /// From this process's environment.
    pub fn from_env() -> HarnessHomes {
        HarnessHomes::from_lookup(|name| std::env::var_os(name).map(PathBuf::from))
    }

    /// From the environment as `lookup`; empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<PathBuf>) -> HarnessHomes {
        let var = |name: &str| lookup(name).filter(|v| !v.as_os_str().is_empty());
        let home = var("HOME");
        let dir = |name: &str, default: &str| {
            var(name).or_else(|| home.as_ref().map(|h| h.join(default)))
        };
        HarnessHomes {
            claude: dir("CLAUDE_CONFIG_DIR", ".claude"),
            codex: dir("CODEX_HOME", ".codex"),
        }
    }
}

/// The session id in a Pi session file's header (its first line, read up to
/// 64 KiB); `None` for anything else.
pub fn pi_session_of(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    std::io::BufReader::new(file.take(64 * 1024))
        .read_line(&mut first)
        .ok()?;
    let header: Value = serde_json::from_str(&first).ok()?;
    mc_base::codec::pi::is_header(&header)
        .then(|| header.get("id")?.as_str().map(str::to_string))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> SessionEnv {
        SessionEnv::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_harness_and_its_session_come_from_what_it_set() {
        let claude = env(&[("CLAUDECODE", "1"), ("CLAUDE_CODE_SESSION_ID", "c-1")]);
        assert_eq!(claude.harness(), Some("claude-code"));
        assert_eq!(claude.session("claude-code").as_deref(), Some("c-1"));
        let codex = env(&[("CODEX_THREAD_ID", "t-1")]);
        assert_eq!(codex.harness(), Some("codex"));
        assert_eq!(codex.session("codex").as_deref(), Some("t-1"));
        let both = env(&[("CODEX_SESSION_ID", "s-1"), ("CODEX_THREAD_ID", "t-1")]);
        assert_eq!(both.session("codex").as_deref(), Some("s-1"));
        // Claude Code wins when both set theirs; blank is unset.
        let nested = env(&[("CLAUDECODE", "1"), ("CODEX_SESSION_ID", "s-1")]);
        assert_eq!(nested.harness(), Some("claude-code"));
        let blank = env(&[("CLAUDECODE", "0"), ("CODEX_SESSION_ID", "  ")]);
        assert_eq!(blank.harness(), None);
        assert_eq!(blank.session("opencode"), None);
    }

    #[test]
    fn harness_homes_follow_their_variables_else_the_home_folder() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| PathBuf::from(v))
            }
        };
        let homes = HarnessHomes::from_lookup(lookup(&[("HOME", "/h"), ("CODEX_HOME", "/cx")]));
        assert_eq!(homes.claude, Some(PathBuf::from("/h/.claude")));
        assert_eq!(homes.codex, Some(PathBuf::from("/cx")));
        let none = HarnessHomes::from_lookup(lookup(&[("HOME", ""), ("CLAUDE_CONFIG_DIR", "")]));
        assert_eq!(none, HarnessHomes::default());
    }

    #[test]
    fn a_pi_session_file_names_its_session_in_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let pi = dir.path().join("pi.jsonl");
        std::fs::write(&pi, mc_base::testkit::PI_SESSION).unwrap();
        assert_eq!(
            pi_session_of(&pi).as_deref(),
            Some("3c9e1f2a-8d7b-4f4e-9a51-0d2c6e7b1a90")
        );
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, "{\"type\": \"message\"}\n").unwrap();
        assert_eq!(pi_session_of(&other), None);
        assert_eq!(pi_session_of(&dir.path().join("missing")), None);
    }
}
