#![allow(clippy::print_stdout)] // its output is what bench/tracing.sh reads
//! A counting OTLP receiver for bench/tracing.sh: prints its two
//! endpoints (`grpc http://...` and `http http://...`), then, at each
//! line read on stdin, the number of spans received so far; exits at
//! the end of stdin.

use std::io::BufRead as _;

fn main() {
    let sink = otlp_harness::Receiver::counting();
    println!("grpc {}", sink.grpc_endpoint());
    println!("http {}", sink.http_endpoint());
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        println!("spans {}", sink.count());
    }
}
