//! What the `tools/bench-*` examples (and the loop-search bench) share:
//! their `[EVENTS] [REPS]` arguments, the median they report, the process's
//! resident memory, and an in-process server.

/// `EVENTS` (default 1,000,000) and `REPS` (default 3) from the command line.
pub fn events_and_reps() -> (usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    let events = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let reps = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    (events, reps)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// What opens the engine a served ledger runs on.
#[allow(dead_code)]
pub type Open = Box<
    dyn FnOnce() -> Result<agentledger::engine::Engine, agentledger::error::LedgerError> + Send,
>;

/// `serve --listen` in this process, on its own thread, on a data dir of
/// its own: its URL and the operator's session token.
#[allow(dead_code)]
pub struct Served {
    pub url: String,
    pub session: String,
    shutdown: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<agentledger::server::Stopped>,
}

#[allow(dead_code)]
impl Served {
    /// Start it (poll 200 ms, as `serve` does by default) and wait until it
    /// listens on a port of 127.0.0.1.
    pub fn start(
        data: &std::path::Path,
        open: Open,
        http: agentledger::server::HttpOptions,
    ) -> Served {
        use agentledger::server::{self, LoopOptions};
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::Duration;
        let shutdown = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = {
            let data = data.to_path_buf();
            let shutdown = shutdown.clone();
            std::thread::spawn(move || {
                server::run(
                    open,
                    LoopOptions {
                        otlp: None,
                        dispatch: true,
                        group: format!("bench-{}", std::process::id()),
                        poll: Duration::from_millis(200),
                        gc_interval: Duration::from_secs(3600),
                        gc_grace: Duration::from_secs(600),
                        checkpoint_every: Duration::from_secs(1),
                        say: Arc::new(|_: &str| {}),
                    },
                    Some(("127.0.0.1:0".parse().unwrap(), http)),
                    &data,
                    server::Signals {
                        shutdown,
                        shutdown_timeout: server::intake::SHUTDOWN_GRACE,
                        on_ready: Box::new(|| {}),
                        on_listening: Box::new(move |url: &str| tx.send(url.to_string()).unwrap()),
                    },
                )
                .unwrap()
            })
        };
        let url = rx.recv().unwrap();
        let session = std::fs::read_to_string(agentledger::server::token_file(data))
            .unwrap()
            .trim()
            .to_string();
        Served {
            url,
            session,
            shutdown,
            thread,
        }
    }

    /// Stop it gracefully; what it did.
    pub fn stop(self) -> agentledger::server::Summary {
        self.shutdown
            .store(true, std::sync::atomic::Ordering::SeqCst);
        match self.thread.join().unwrap() {
            agentledger::server::Stopped::Cleanly(summary) => summary,
            late => panic!("the server did not stop in time: {late:?}"),
        }
    }
}

/// Resident memory of this process, in bytes.
#[allow(dead_code)]
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Hand a record to a threaded rdkafka producer, waiting while its local
/// queue is full (the pipelined baselines keep every record in flight).
#[allow(dead_code)]
pub fn send_queued<C: rdkafka::producer::ProducerContext<DeliveryOpaque = ()>>(
    producer: &rdkafka::producer::ThreadedProducer<C>,
    mut rec: rdkafka::producer::BaseRecord<'_, [u8], [u8], ()>,
) {
    loop {
        match producer.send(rec) {
            Ok(()) => return,
            Err((_, back)) => {
                rec = back;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}
