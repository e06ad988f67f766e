//! The worker process the chaos tests SIGKILL (`tests/chaos.rs`): see
//! `aedb_queue_itests::chaos::worker`.

fn main() {
    aedb_queue_itests::chaos::worker::worker_main();
}
