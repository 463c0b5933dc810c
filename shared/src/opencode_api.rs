//! A small client for a running OpenCode server's HTTP API.
