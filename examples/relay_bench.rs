//! The network relay (`keel relay`, the policy side of `sandbox.network: Allow([...])`)
//! against a direct loopback connection, interleaved in one run (issue 19's benchmark).
//!
//! The bench makes a task's network namespace exactly as the daemon does
//! (`keel::network::task_namespace::make`: only `lo`, every address `local` on it, the
//! resolver's sockets, the static listeners, the packet sniffer), writes the relay's spec and
//! starts the real `keel relay` binary with those descriptors. Every "outside" service is on
//! the host's 127.0.0.1 (echo, discard, hold servers and a DNS server that maps
//! `*.bench.test.example` to 127.0.0.1); the agent's side is sockets made inside the
//! namespace. Nothing leaves this machine.
//!
//! 1. connect latency: connect, send one byte, read its echo — inside to
//!    `host.keel.internal:P` (entry `host:P`, the relay connecting to the host's
//!    127.0.0.1:P), and to a listed name's fake address (`bench.test.example:P2` resolved on
//!    the host to 127.0.0.1, let through the rebinding check by the entry `127.0.0.1/32:P2`;
//!    its host addresses cached for 10 s) — against the same to 127.0.0.1:P from the host's
//!    namespace; ROUNDS rounds, interleaved (the order alternating). Then the resolution
//!    cost: names never seen (`nJ.bench.test.example`, a wildcard entry), their first query
//!    to the sandbox's resolver and first connect against the second of each.
//! 2. bulk throughput: GIB GiB one way from inside to a discard server on the host's
//!    loopback (it counts and answers the count), through the relay against directly; 3
//!    rounds interleaved.
//! 3. memory per idle allowed connection: IDLE connections through the relay, each
//!    delivered one byte and then idle; the relay's VmRSS before and after, and the kernel's
//!    slab memory (/proc/slabinfo: sockets, pipes, files, epoll items — not what is larger
//!    than 8 KiB, which comes from the page allocator) for those against the same count of
//!    direct ones. Measured first, before the other rounds' TIME_WAIT sockets exist.
//!
//! `cargo run --release --example relay_bench -- [ROUNDS] [GIB] [IDLE]` (as root; build the
//! `keel` binary beside it first: it runs target/…/release/keel, or $KEEL_BIN).

use keel::network::relay_protocol::RelayReport;
use keel::network::task_namespace;
use nix::sys::socket;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const WAIT: Duration = Duration::from_secs(30);
/// The names the bench's DNS server answers (with 127.0.0.1).
const ZONE: &str = "bench.test.example";
/// Names resolved for the first time, for the resolution cost.
const FRESH_NAMES: usize = 50;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let gib: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(4);
    let idle: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1000);
    assert!(
        nix::unistd::geteuid().is_root(),
        "run as root (network namespaces)"
    );
    raise_open_files_limit();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!("(load average at the start: {})", load.join(" "));

    let echo = serve(echo_one);
    let named = serve(echo_one);
    let sink = serve(discard_and_count);
    let held = Arc::new(Mutex::new(Vec::new()));
    let hold = hold_server(held.clone());
    let dns = dns_server();
    let entries = vec![
        format!("host:{echo}"),
        format!("host:{sink}"),
        format!("host:{hold}"),
        format!("{ZONE}:{named}"),
        format!("*.{ZONE}:{named}"),
        format!("127.0.0.1/32:{named}"),
    ];
    let relay = Relay::start(&entries, dns);

    // The memory first: the kernel's slab figures would otherwise include the TIME_WAIT
    // sockets of the rounds before, expiring meanwhile.
    for _ in 0..20 {
        relay.inside(move || echo_round(SocketAddrV4::new(HOST, echo)));
    }
    let mut figures = memory(&relay, idle, hold, &held);
    figures.extend(latency(&relay, rounds, echo, named));
    figures.extend(throughput(&relay, gib, sink));
    // For scripts/bench: the figures above, one JSON object.
    let fields: Vec<String> = (figures.iter())
        .map(|(name, value)| format!("\"{name}\": {value:.4}"))
        .collect();
    println!("figures: {{{}}}", fields.join(", "));
}

// --- 1. connect latency ------------------------------------------------------------------

/// The figures: (name, value) for scripts/bench.
type Figures = Vec<(&'static str, f64)>;

fn latency(relay: &Relay, rounds: usize, echo: u16, named: u16) -> Figures {
    let direct_to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, echo);
    let host_to = SocketAddrV4::new(HOST, echo);
    let t = Instant::now();
    let fake = relay.query(ZONE);
    let first_query = t.elapsed();
    let name_to = SocketAddrV4::new(fake, named);
    let first_connect = relay.inside(move || echo_round(name_to));
    // Warm up both paths (the echo server's threads, the relay's slab).
    for _ in 0..20 {
        echo_round(direct_to);
        relay.inside(move || echo_round(host_to));
    }
    let (mut direct, mut host, mut name) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        if i % 2 == 0 {
            direct.push(echo_round(direct_to));
        }
        host.push(relay.inside(move || echo_round(host_to)));
        name.push(relay.inside(move || echo_round(name_to)));
        if i % 2 == 1 {
            direct.push(echo_round(direct_to));
        }
    }
    let [d, h, n] = [&mut direct, &mut host, &mut name].map(|v| median_p99(v));
    let added = |(m, p): (f64, f64)| format!("added {:.3} / {:.3} ms", m - d.0, p - d.1);
    println!("connect + first echoed byte, {rounds} rounds each, interleaved (median / p99):");
    println!("  direct 127.0.0.1:P (host ns)        {}", shown(d));
    println!(
        "  relay, host.keel.internal:P         {}   {} (goal < 0.5 / < 2 ms)",
        shown(h),
        added(h)
    );
    println!("  relay, {ZONE}:P2 (cached) {}   {}", shown(n), added(n));

    // The resolution cost: names never seen, then the same names again.
    let mut samples: [Vec<Duration>; 4] = Default::default();
    samples[0].push(first_query);
    samples[2].push(first_connect);
    for j in 0..FRESH_NAMES {
        let fresh = format!("n{j}.{ZONE}");
        let t = Instant::now();
        let fake = relay.query(&fresh);
        samples[0].push(t.elapsed());
        let t = Instant::now();
        assert_eq!(relay.query(&fresh), fake);
        samples[1].push(t.elapsed());
        let to = SocketAddrV4::new(fake, named);
        samples[2].push(relay.inside(move || echo_round(to)));
        samples[3].push(relay.inside(move || echo_round(to)));
    }
    let [first_q, again_q, first_c, again_c] = samples.each_mut().map(|v| median_p99(v));
    let fresh = FRESH_NAMES + 1;
    println!("  a name's resolution, {fresh} names seen for the first time (median / p99):");
    println!(
        "    sandbox DNS query, first (its listeners made) {}; again {}",
        shown(first_q),
        shown(again_q)
    );
    println!(
        "    connect + echo, first (resolved on the host)  {}; cached {}",
        shown(first_c),
        shown(again_c)
    );
    vec![
        ("direct_median_ms", d.0),
        ("direct_p99_ms", d.1),
        ("host_median_ms", h.0),
        ("host_p99_ms", h.1),
        ("name_cached_median_ms", n.0),
        ("name_cached_p99_ms", n.1),
        ("name_first_median_ms", first_c.0),
        ("dns_first_median_ms", first_q.0),
    ]
}

/// The median and p99 of `samples`, in ms.
fn median_p99(samples: &mut [Duration]) -> (f64, f64) {
    (ms(percentile(samples, 50.0)), ms(percentile(samples, 99.0)))
}

fn shown((median, p99): (f64, f64)) -> String {
    format!("{median:7.3} / {p99:7.3} ms")
}

/// Connect to `to` (from the calling thread's network namespace), send one byte and read its
/// echo: the time all of it took.
fn echo_round(to: SocketAddrV4) -> Duration {
    let t = Instant::now();
    let mut stream = TcpStream::connect(to).expect("connect");
    stream.write_all(b"x").expect("send");
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).expect("the echo");
    t.elapsed()
}

// --- 2. bulk throughput ------------------------------------------------------------------

fn throughput(relay: &Relay, gib: u64, sink: u16) -> Figures {
    let total = gib << 30;
    let chunk: Arc<[u8]> = vec![0x5au8; 1 << 20].into();
    let send = move |to: SocketAddrV4| -> f64 {
        let t = Instant::now();
        let mut stream = TcpStream::connect(to).expect("connect");
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            stream.write_all(&chunk[..n]).expect("send");
            left -= n as u64;
        }
        stream.shutdown(Shutdown::Write).expect("shutdown");
        let mut count = [0u8; 8];
        stream.read_exact(&mut count).expect("the count");
        let took = t.elapsed().as_secs_f64();
        assert_eq!(u64::from_be_bytes(count), total, "bytes that arrived");
        total as f64 / took / 1e9
    };
    let (mut direct, mut relayed) = (Vec::new(), Vec::new());
    let mut relay_cpu = Duration::ZERO;
    for round in 0..3 {
        let direct_round =
            |v: &mut Vec<f64>| v.push(send(SocketAddrV4::new(Ipv4Addr::LOCALHOST, sink)));
        if round % 2 == 0 {
            direct_round(&mut direct);
        }
        let send = send.clone();
        let cpu = cpu_time(relay.pid);
        relayed.push(relay.inside(move || send(SocketAddrV4::new(HOST, sink))));
        relay_cpu += cpu_time(relay.pid) - cpu;
        if round % 2 == 1 {
            direct_round(&mut direct);
        }
    }
    let cpu_per_gb = relay_cpu.as_secs_f64() / (3 * total) as f64 * 1e9;
    let (rounds_d, rounds_r) = (format!("{direct:.2?}"), format!("{relayed:.2?}"));
    direct.sort_by(f64::total_cmp);
    relayed.sort_by(f64::total_cmp);
    let (d, r) = (direct[1], relayed[1]);
    println!("bulk throughput, {gib} GiB one way, 3 rounds interleaved (median; each round):");
    println!("  direct 127.0.0.1 (host ns)          {d:7.2} GB/s  {rounds_d}");
    println!("  relay, host.keel.internal           {r:7.2} GB/s  {rounds_r}");
    println!(
        "  relay / direct                      {:7.0} %     (goal >= 1 GB/s and >= 50%)",
        r / d * 100.0
    );
    println!("  the relay's CPU                     {cpu_per_gb:7.3} s per GB");
    let names = ["direct_gbps", "relay_gbps", "relay_cpu_s_per_gb"];
    names.into_iter().zip([d, r, cpu_per_gb]).collect()
}

/// The CPU time `pid` has used (user and system; /proc/PID/stat, in clock ticks).
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the relay's stat");
    let fields: Vec<u64> = (stat.rsplit_once(')').expect("stat").1.split_whitespace())
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields[11] + fields[12];
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

// --- 3. memory per idle connection -------------------------------------------------------

fn memory(relay: &Relay, idle: usize, hold: u16, held: &Mutex<Vec<TcpStream>>) -> Figures {
    let open = move |to: SocketAddrV4| -> Vec<TcpStream> {
        (0..idle)
            .map(|_| {
                let mut stream = TcpStream::connect(to).expect("connect");
                stream.set_read_timeout(Some(WAIT)).unwrap();
                let mut byte = [0u8; 1];
                stream
                    .read_exact(&mut byte)
                    .expect("the hold server's byte");
                stream
            })
            .collect()
    };
    let settle = || std::thread::sleep(Duration::from_millis(500));
    let held_count = || held.lock().unwrap().len();

    // The kernel's side of direct connections, for comparison.
    settle();
    let slab_before = slab_bytes();
    let direct = open(SocketAddrV4::new(Ipv4Addr::LOCALHOST, hold));
    wait_for("the hold server's accepts", || held_count() == idle);
    settle();
    let direct_slab = slab_bytes().saturating_sub(slab_before);
    drop(direct);
    held.lock().unwrap().clear();

    relay.report_until("no connection open", |r| r.open_connections == 0);
    settle();
    let (rss_before, slab_before) = (rss_kib(relay.pid), slab_bytes());
    let relayed = relay.inside(move || open(SocketAddrV4::new(HOST, hold)));
    relay.report_until("every idle connection open", |r| {
        r.open_connections == idle as u64
    });
    settle();
    let (rss_after, slab_after) = (rss_kib(relay.pid), slab_bytes());
    let relayed_slab = slab_after.saturating_sub(slab_before);
    let per = |bytes: u64| bytes as f64 / 1024.0 / idle as f64;
    let rss = (rss_after as f64 - rss_before as f64) / idle as f64;
    let (relayed_slab, direct_slab) = (per(relayed_slab), per(direct_slab));
    println!("{idle} idle connections (each delivered one byte, then idle):");
    println!("  relay RSS  {rss_before} KiB → {rss_after} KiB: {rss:.2} KiB per connection");
    println!(
        "  kernel slab, relayed (4 sockets, 2 pipes each) {relayed_slab:6.2} KiB per connection"
    );
    println!(
        "  kernel slab, direct (2 sockets each)           {direct_slab:6.2} KiB per connection \
         (the relay adds {:.2})",
        relayed_slab - direct_slab
    );
    drop(relayed);
    held.lock().unwrap().clear();
    let names = [
        "rss_kib_per_conn",
        "slab_kib_per_conn",
        "direct_slab_kib_per_conn",
    ];
    names
        .into_iter()
        .zip([rss, relayed_slab, direct_slab])
        .collect()
}

/// VmRSS of `pid`, KiB.
fn rss_kib(pid: i32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the relay's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// The kernel's slab memory in use (every cache's active objects times their size).
fn slab_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/slabinfo").unwrap_or_default();
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let active: u64 = fields.get(1)?.parse().ok()?;
            let size: u64 = fields.get(3)?.parse().ok()?;
            Some(active * size)
        })
        .sum()
}

// --- the relay and its namespace ---------------------------------------------------------

type Job = Box<dyn FnOnce() + Send>;

/// A task's network namespace as the daemon makes it for `Allow(entries)`, and its relay
/// (`keel relay`); dropped: the relay killed by its pid and reaped, the scratch directory
/// removed, the namespace's last descriptors closed.
struct Relay {
    /// Work for the thread inside the namespace (its end closed: that thread ends).
    jobs: mpsc::Sender<Job>,
    pid: i32,
    scratch: PathBuf,
    report: PathBuf,
}

impl Relay {
    fn start(entries: &[String], dns: SocketAddr) -> Relay {
        let keel_bin = std::env::var_os("KEEL_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let exe = std::env::current_exe().expect("own path");
                exe.parent().and_then(|p| p.parent()).unwrap().join("keel")
            });
        assert!(
            keel_bin.exists(),
            "{}: build keel first (cargo build --release --bin keel)",
            keel_bin.display()
        );
        let scratch = PathBuf::from(format!("/dev/shm/keel-relay-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let lists = BTreeMap::new();
        let (ns, sockets) =
            task_namespace::make(Some((entries, &lists)), None).expect("the task's namespace");
        let sockets = sockets.expect("the relay's sockets");
        std::fs::create_dir_all(task_namespace::network_dir(&scratch)).expect("scratch");
        let fds = sockets.relay_fds(ns.as_fd());
        let spec = task_namespace::relay_spec(entries, &lists, ("bench", &scratch, Some(dns)), fds);
        let spec_path = scratch.join("relay.json");
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).expect("the spec");
        let log = std::fs::File::create(scratch.join("relay.log")).expect("the relay's log");
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let cstr = |s: &std::ffi::OsStr| CString::new(s.as_encoded_bytes()).unwrap();
        let program = cstr(keel_bin.as_os_str());
        let argv = [
            cstr("keel".as_ref()),
            cstr("relay".as_ref()),
            cstr("--spec".as_ref()),
            cstr(spec_path.as_os_str()),
        ];
        let envp: Vec<CString> = ["PATH=/usr/bin:/bin"]
            .iter()
            .map(|e| CString::new(*e).unwrap())
            .collect();
        let keep = sockets.raw_fds(ns.as_fd());
        let request = keel::sys::SpawnRequest {
            program: &program,
            argv: &argv,
            envp: &envp,
            stdin: devnull.as_raw_fd(),
            stdout: log.as_raw_fd(),
            stderr: log.as_raw_fd(),
            extra_flags: 0,
            pid_namespace: None,
            cgroup_fd: None,
            keep_as_fd3: None,
            keep_fds: &keep,
            nofile: None,
            signals_blocked: false,
        };
        let (pid, _pidfd) = keel::sys::spawn_with_pidfd(&request).expect("start the relay");
        // The relay holds its own copies now; ours close here.
        drop(sockets);
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("inside".into())
            .spawn(move || {
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .expect("join the task's namespace");
                drop(ns);
                for job in queue {
                    job();
                }
            })
            .expect("the thread inside the namespace");
        let relay = Relay {
            jobs,
            pid,
            report: spec.report.clone(),
            scratch,
        };
        relay.report_until("the relay's first report", |r| r.pid == pid as u32);
        relay
    }

    fn report_until(&self, what: &str, check: impl Fn(&RelayReport) -> bool) {
        wait_for(what, || {
            std::fs::read(&self.report)
                .ok()
                .and_then(|b| serde_json::from_slice::<RelayReport>(&b).ok())
                .is_some_and(|r| check(&r))
        });
    }

    /// `work` on the bench's thread inside the namespace (made once: a socket made there is
    /// the namespace's), and what it returned.
    fn inside<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = done.send(work());
            }))
            .expect("the thread inside the namespace");
        result.recv().expect("the work inside the namespace")
    }

    /// Ask the sandbox's resolver for `name`'s address, from inside.
    fn query(&self, name: &str) -> Ipv4Addr {
        let socket = self
            .inside(|| UdpSocket::bind("0.0.0.0:0"))
            .expect("a UDP socket inside");
        socket.set_read_timeout(Some(WAIT)).unwrap();
        let message = keel::network::dns::encode_query(0x4242, name, 1).unwrap();
        socket.send_to(&message, (RESOLVER, 53)).expect("query");
        let mut buf = [0u8; 1500];
        let n = socket
            .recv(&mut buf)
            .expect("the sandbox resolver's answer");
        match keel::network::dns::parse_answer(&buf[..n], 0x4242, 1) {
            Some(keel::network::dns::Answer::Addresses { addresses, .. }) => {
                match addresses.first() {
                    Some(std::net::IpAddr::V4(v4)) => *v4,
                    other => panic!("{name}: {other:?}"),
                }
            }
            _ => panic!("{name}: no address"),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

// --- the host's services (all on 127.0.0.1) ----------------------------------------------

/// A server on the host's 127.0.0.1 (a free port) running `each` on a thread per connection.
fn serve(each: fn(TcpStream)) -> u16 {
    let listener = listen();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || each(stream));
        }
    });
    port
}

fn listen() -> TcpListener {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen on 127.0.0.1");
    socket::listen(&listener, socket::Backlog::new(4096).unwrap()).unwrap();
    listener
}

/// Echo until the end of file, then pass it on.
fn echo_one(mut stream: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        if stream.write_all(&buf[..n]).is_err() {
            return;
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
}

/// Read and drop everything, then answer how many bytes came (8 bytes, big-endian).
fn discard_and_count(mut stream: TcpStream) {
    let mut buf = vec![0u8; 1 << 20];
    let mut count = 0u64;
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        count += n as u64;
    }
    let _ = stream.write_all(&count.to_be_bytes());
}

/// Each connection gets one byte and is kept open (in `held`) until the bench lets it go.
fn hold_server(held: Arc<Mutex<Vec<TcpStream>>>) -> u16 {
    let listener = listen();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"h");
            held.lock().unwrap().push(stream);
        }
    });
    port
}

/// A DNS server on 127.0.0.1: `A` of `ZONE` and its subdomains is 127.0.0.1, other types
/// have no record; every other name is NXDOMAIN.
fn dns_server() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("the DNS server's socket");
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let Some((name, end)) = read_question(&buf[..n]) else {
                continue;
            };
            let qtype = u16::from_be_bytes([buf[end], buf[end + 1]]);
            let ours = name == ZONE || name.ends_with(&format!(".{ZONE}"));
            let record = ours && qtype == 1;
            let mut out = buf[..2].to_vec();
            out.extend_from_slice(&(0x8180u16 | if ours { 0 } else { 3 }).to_be_bytes());
            out.extend_from_slice(&[0, 1, 0, u8::from(record), 0, 0, 0, 0]);
            out.extend_from_slice(&buf[12..end + 4]);
            if record {
                out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                out.extend_from_slice(&Ipv4Addr::LOCALHOST.octets());
            }
            let _ = socket.send_to(&out, peer);
        }
    });
    addr
}

/// A query's name (lower case) and where its type begins.
fn read_question(message: &[u8]) -> Option<(String, usize)> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *message.get(at)? as usize;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(message.get(at + 1..at + 1 + len)?).to_lowercase());
        at += 1 + len;
    }
    message.get(at + 1..at + 5)?;
    Some((labels.join("."), at + 1))
}

// --- small things ------------------------------------------------------------------------

fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let at = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[at.min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
