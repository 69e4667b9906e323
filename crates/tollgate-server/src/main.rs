//! `tollgate`: parses flags, runs a subcommand, maps its outcome to an exit
//! code (0 success, 1 failure, 2 bad command line).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use tollgate_server::cli::{Cli, Command};
use tollgate_server::{check, replay, validate};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate(args) => match validate::run(&args) {
            Ok(config) => {
                let file = args.config.display().to_string();
                let mut stdout = std::io::stdout().lock();
                if write!(stdout, "{}", validate::summary(&config, &file)).is_err() {
                    return ExitCode::FAILURE;
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Check(args) => match check::run(&args) {
            Ok(tally) => {
                eprint!("{tally}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tollgate check: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Replay(args) => match replay::run(&args) {
            Ok(summary) => {
                eprint!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tollgate replay: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
