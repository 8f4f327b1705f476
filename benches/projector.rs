//! Criterion benchmarks of the hot paths: codec, embedded log append, and
//! projecting a synthetic ledger into fresh views. The rebuild ratio against
//! raw sled is measured by `tools/bench-rebuild`.

use agentledger::codec;
use agentledger::engine::synthetic::{chain_records, write_synthetic_log};
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::Log;
use agentledger::model::Topic;
use agentledger::projector::project_all;
use agentledger::views::Views;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

fn codec_bench(c: &mut Criterion) {
    let recs = chain_records(7);
    let encoded: Vec<Vec<u8>> = recs
        .iter()
        .map(|(run, step, ev)| codec::encode(ev, run, run, 0, "bench", *step).unwrap())
        .collect();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("encode_chain", |b| {
        b.iter(|| {
            for (run, step, ev) in &recs {
                criterion::black_box(codec::encode(ev, run, run, 0, "bench", *step).unwrap());
            }
        })
    });
    g.bench_function("decode_chain", |b| {
        b.iter(|| {
            for bytes in &encoded {
                criterion::black_box(codec::decode(bytes).unwrap());
            }
        })
    });
    g.finish();
}

fn append_bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(dir.path(), &EmbeddedConfig::default()).unwrap();
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..1000)
        .map(|i| (format!("chain-{i}").into_bytes(), vec![0u8; 300]))
        .collect();
    let mut g = c.benchmark_group("embedded_log");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.sample_size(20);
    g.bench_function("append_1000_fsynced", |b| {
        b.iter(|| log.append(Topic::Ledger, &batch).unwrap())
    });
    g.finish();
}

fn project_bench(c: &mut Criterion) {
    let events = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(dir.path().join("log"), &EmbeddedConfig::default()).unwrap();
    write_synthetic_log(&log, events).unwrap();
    let mut g = c.benchmark_group("projector");
    g.throughput(Throughput::Elements(events as u64));
    g.sample_size(10);
    g.bench_function("rebuild_20k_events", |b| {
        // Opening fresh views is setup and closing them happens after the
        // timing (criterion drops what the routine returns untimed).
        b.iter_batched(
            || {
                let vdir = tempfile::tempdir().unwrap();
                let views = Views::open(vdir.path()).unwrap();
                (vdir, views)
            },
            |(vdir, views)| {
                project_all(&log, &views, None, &|_| {}).unwrap();
                (views, vdir)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, codec_bench, append_bench, project_bench);
criterion_main!(benches);
