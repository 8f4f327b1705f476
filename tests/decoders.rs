//! Every decoder of outside bytes answers arbitrary and mutated input with
//! a value or a clear error, never a panic (a short run; the example
//! `fuzz_decoders` runs a million cases per decoder).

mod fuzz;

#[test]
fn decoders_never_panic_on_arbitrary_or_mutated_input() {
    for (name, run) in fuzz::all(3000) {
        let t = std::time::Instant::now();
        run();
        eprintln!("{name}: 3000 cases in {:.2}s", t.elapsed().as_secs_f64());
    }
}
