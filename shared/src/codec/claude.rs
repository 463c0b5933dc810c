//! Claude Code session transcripts (JSONL).
