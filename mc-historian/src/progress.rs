//! Progress on stderr (chunks, model calls, tokens), drawn only when stderr
//! is a terminal: pipelines and logs get nothing but warnings and errors.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use mc_history::historian::Progress as Event;
use mc_llm as llm;

pub struct Progress {
    bar: Option<ProgressBar>,
    tokens_in: u64,
    tokens_out: u64,
}

impl Progress {
    pub fn new(terminal: bool) -> Progress {
        let bar = terminal.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            bar,
            tokens_in: 0,
            tokens_out: 0,
        }
    }

    pub fn show(&mut self, event: &Event) {
        let Some(bar) = &self.bar else { return };
        match event {
            Event::Chunk { index, info } => bar.set_message(format!(
                "chunk {index}: messages {}-{} ({} tokens, {} eligible)",
                info.first, info.last, info.tokens, info.eligible_tokens
            )),
            Event::Llm(llm::Event::Calling { model, attempt }) => {
                let again = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                bar.set_message(format!("asking {model}{again}…"));
            }
            Event::Llm(llm::Event::Retrying { delay, error, .. }) => bar.println(format!(
                "  {error}; retrying in {:.1}s",
                delay.as_secs_f64()
            )),
            Event::Llm(llm::Event::FallingBack { to, error, .. }) => {
                bar.println(format!("  {error}; trying {to}"))
            }
            Event::Llm(llm::Event::Note { model, message }) => {
                bar.println(format!("  {model}: {message}"))
            }
            Event::Answer {
                model,
                tokens_in,
                tokens_out,
            } => {
                self.tokens_in += tokens_in;
                self.tokens_out += tokens_out;
                bar.set_message(format!(
                    "{model} answered ({} tokens in, {} out so far)",
                    self.tokens_in, self.tokens_out
                ));
            }
            Event::Repair { problem } => {
                bar.println(format!("  answer rejected ({problem}); asking once more"))
            }
            Event::Published {
                compartments,
                held_back,
            } => bar.println(format!(
                "  published {compartments} compartment{}{}",
                if *compartments == 1 { "" } else { "s" },
                if *held_back {
                    " (the last one held back for the next run)"
                } else {
                    ""
                }
            )),
        }
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
