//! The benchmark's floor: read a JSON document on stdin, parse it into a
//! `serde_json::Value` and write it back to stdout, compact. Nothing else, so
//! it measures what any JSON-in/JSON-out process must pay: spawn, read,
//! parse, serialise, write (with the workspace's serde_json build).

use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use serde_json::Value;

/// Reads JSON on stdin and writes it back re-serialised: the floor any JSON
/// filter pays, which bench-transform times mc-transform against.
#[derive(clap::Parser)]
#[command(name = "json-floor")]
struct Args {}

fn main() -> ExitCode {
    let Args {} = clap::Parser::parse();
    let mut text = String::new();
    if let Err(e) = io::stdin().lock().read_to_string(&mut text) {
        eprintln!("json-floor: cannot read stdin: {e}");
        return ExitCode::from(2);
    }
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("json-floor: input is not JSON: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let written = serde_json::to_writer(&mut out, &value)
        .map_err(io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("json-floor: cannot write stdout: {e}");
            ExitCode::FAILURE
        }
    }
}
