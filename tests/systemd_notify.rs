//! Under systemd (`Type=notify`, `WatchdogSec=`): a datagram socket stands in for systemd's
//! notify socket and hears what the daemon says, when, and that a stopped loop goes quiet.

mod common;
use common::*;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// Every datagram that arrives within `window`.
fn collect(socket: &UnixDatagram, window: Duration) -> Vec<String> {
    receive(socket, window, |_| false).0
}

/// Datagrams until one satisfies `done` (within `within`), that one included.
fn until(socket: &UnixDatagram, within: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
    let (got, finished) = receive(socket, within, done);
    assert!(finished, "not heard within {within:?}: {got:?}");
    got
}

/// Datagrams arriving within `within`, up to the first that satisfies `done`; whether one did.
fn receive(
    socket: &UnixDatagram,
    within: Duration,
    done: impl Fn(&str) -> bool,
) -> (Vec<String>, bool) {
    let mut got = Vec::new();
    let end = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        socket
            .set_read_timeout(Some(
                end.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        if let Ok(n) = socket.recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            let finished = done(&message);
            got.push(message);
            if finished {
                return (got, true);
            }
        }
    }
    (got, false)
}

fn pings(messages: &[String]) -> usize {
    messages.iter().filter(|m| *m == "WATCHDOG=1").count()
}

#[test]
fn systemd_hears_ready_status_and_watchdog_pings_from_the_loop() {
    if !require_root("sd_notify") {
        return;
    }
    let mut d = Daemon::prepare("notify");
    let path = d.scratch.dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    d.env.push(("NOTIFY_SOCKET".into(), path_str(&path)));
    d.env.push(("WATCHDOG_USEC".into(), "400000".into()));
    d.spawn();
    let heard = until(&socket, Duration::from_secs(5), |m| {
        m.starts_with("READY=1")
    });
    assert_eq!(
        heard.last().unwrap(),
        "READY=1\nSTATUS=0 tasks",
        "{heard:?}"
    );

    // WATCHDOG_USEC=400000: a ping every 200 ms, from the loop.
    let window = collect(&socket, Duration::from_secs(2));
    let n = pings(&window);
    assert!((8..=12).contains(&n), "{n} pings in 2 s: {window:?}");

    d.write_unit(
        "idle",
        r#"Unit(command: ["/bin/sh", "-c", "env > /work/env; exec sleep 600"], resources: Resources(cpu: 0.2, memory: "64M"))"#,
    );
    let heard = until(&socket, Duration::from_secs(10), |m| {
        m == "STATUS=1 task: 1 running"
    });
    assert!(
        heard.iter().any(|m| m.starts_with("STATUS=1 task: 1 ")),
        "{heard:?}"
    );
    let env = d.task_dir("idle").join("work/env");
    wait_until(Duration::from_secs(5), "the agent's environment", || {
        std::fs::read_to_string(&env).is_ok_and(|t| t.contains("KEEL_UNIT"))
    });
    let env = std::fs::read_to_string(&env).unwrap();
    for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        assert!(!env.contains(name), "{name} reached the agent:\n{env}");
    }

    // A loop that does not run neither pings nor answers `keel health`.
    let pid = nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    collect(&socket, Duration::from_millis(300));
    let stopped = collect(&socket, Duration::from_secs(1));
    let health = d.keel(&["health"]);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(pings(&stopped), 0, "{stopped:?}");
    assert!(
        !health.status.success(),
        "health of a stopped loop succeeded"
    );
    let resumed = collect(&socket, Duration::from_secs(1));
    assert!(pings(&resumed) >= 3, "{resumed:?}");
    assert!(d.keel(&["health"]).status.success());

    d.keel(&["shutdown"]);
    let heard = until(&socket, Duration::from_secs(10), |m| m == "STOPPING=1");
    assert!(!heard.is_empty());
}
