//! The cost of the connection owner check (area `peer` of `docs/performance.md`; only the
//! daemon's own user gets in, and the goal is under 50 µs per new connection). Two figures:
//! - the `sock_diag` lookup alone ([`socket_owner`]) for 2,000 freshly accepted loopback
//!   connections, after 200 of warm-up: p50/p90/p99 and the mean;
//! - the whole check as the listener makes it ([`classify`] with the owner policy), same
//!   sample, to show the policy adds nothing measurable.
//!
//! `cargo bench --bench peer` measures an optimised build.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use agentprism::transport::peer::{Access, Caller, classify, socket_owner};

mod support;

const WARM_UP: usize = 200;
const SAMPLES: usize = 2_000;

fn main() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let local = listener.local_addr().expect("local address");
    let uid = nix::unistd::geteuid().as_raw();
    let access = Access::owner(None);
    let mut lookup = Vec::with_capacity(SAMPLES);
    let mut check = Vec::with_capacity(SAMPLES);
    for round in 0..WARM_UP + SAMPLES {
        let client = TcpStream::connect(local).expect("connect");
        let (accepted, peer) = listener.accept().expect("accept");
        let started = Instant::now();
        let owner = socket_owner(local, peer);
        let looked_up = started.elapsed();
        let started = Instant::now();
        let caller = classify(&access, local, peer);
        let checked = started.elapsed();
        assert_eq!(owner, Ok(Some(uid)), "the lookup names our own connection");
        assert_eq!(caller, Caller::Trusted);
        if round >= WARM_UP {
            lookup.push(looked_up);
            check.push(checked);
        }
        drop((client, accepted));
    }
    report("sock_diag lookup", &mut lookup);
    report("owner check (classify)", &mut check);
    let p50 = |samples: &[Duration]| micros(samples[(samples.len() - 1) / 2]);
    support::figure(
        "peer",
        "`sock_diag` lookup of a new connection's owner: p50",
        format!("{:.1} µs", p50(&lookup)),
        "< 50 µs",
    );
    support::figure(
        "peer",
        "the whole owner check (`classify`): p50",
        format!("{:.1} µs", p50(&check)),
        "< 50 µs",
    );
    println!("goal: p50 under 50 µs per new connection");
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{what}: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, mean {:.1} µs ({} connections)",
        micros(at(0.5)),
        micros(at(0.9)),
        micros(at(0.99)),
        micros(mean),
        samples.len()
    );
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
