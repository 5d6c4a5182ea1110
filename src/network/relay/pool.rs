//! The relay's resolver threads: a listed name's addresses are asked of the host's DNS
//! server here, never on the event loop (an answer may take seconds); each result goes back
//! through a channel, and the loop's waker is woken.

use crate::network::resolver::{self, ResolveError};
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A name to resolve for the connection in slot `slot` of generation `generation`.
pub struct Job {
    pub slot: usize,
    pub generation: u64,
    pub name: String,
}

pub struct Done {
    pub slot: usize,
    pub generation: u64,
    pub name: String,
    pub result: Result<Vec<IpAddr>, ResolveError>,
}

pub struct Pool {
    jobs: Sender<Job>,
    pub done: Receiver<Done>,
}

impl Pool {
    /// `threads` threads asking `server` (`None`: none is known, every name fails), each
    /// query within `timeout`.
    pub fn start(
        threads: usize,
        server: Option<SocketAddr>,
        timeout: Duration,
        waker: Arc<mio::Waker>,
    ) -> std::io::Result<Pool> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (results, done) = mpsc::channel::<Done>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..threads {
            let queue = Arc::clone(&queue);
            let results = results.clone();
            let waker = Arc::clone(&waker);
            std::thread::Builder::new()
                .name(format!("resolver-{n}"))
                .spawn(move || loop {
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let result = match server {
                        Some(server) => resolver::resolve(server, &job.name, timeout),
                        None => Err(ResolveError::Io(
                            "no DNS server known (spec.resolver, /etc/resolv.conf)".into(),
                        )),
                    };
                    let done = Done {
                        slot: job.slot,
                        generation: job.generation,
                        name: job.name,
                        result,
                    };
                    if results.send(done).is_err() {
                        return;
                    }
                    let _ = waker.wake();
                })?;
        }
        Ok(Pool { jobs, done })
    }

    pub fn submit(&self, job: Job) {
        // The threads end only with the relay: a send cannot fail before.
        let _ = self.jobs.send(job);
    }
}
