//! One module per subcommand; each takes its input value and gives its answer
//! (the resident `serve` calls the same functions as the one-shot commands).

pub mod claude;
pub mod codex;
pub mod ensure;
pub mod gateway;
pub mod overflow;
pub mod pass;
pub mod recount;
pub mod reduce;
pub mod serve;
pub mod status;
pub mod system;
