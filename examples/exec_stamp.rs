//! The agent of the start-latency benchmark (examples/spawn_bench.rs): prints the
//! CLOCK_MONOTONIC time, in nanoseconds, at which it began to run, and exits 0. The same
//! program in every row, so "start → agent running" compares like with like.

fn main() {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    println!(
        "{}",
        now.tv_sec() as u128 * 1_000_000_000 + now.tv_nsec() as u128
    );
}
