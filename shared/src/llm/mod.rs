//! The LLM client: providers configured by the user, called over HTTP or as a command.
