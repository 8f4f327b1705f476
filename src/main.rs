//! The `agentledger` command line.

mod cli;

// sled and the projector allocate many small buffers; mimalloc keeps that
// cheap (see tools/bench-rebuild).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::run());
}
