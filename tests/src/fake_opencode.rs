//! A fake OpenCode server on 127.0.0.1 for tests.
