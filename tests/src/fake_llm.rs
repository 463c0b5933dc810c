//! A fake LLM provider on 127.0.0.1 for tests (Anthropic and OpenAI wire formats).
