"""scripts/bench's section `admission` (keel issue 22): admission under pressure.

12 idle agents (`sleep`) dropped into the units directory at once, and 12 compile-like bursts
(a shell running 2 busy loops of a fixed amount of work, calibrated to
KEEL_BENCH_BURST_SECONDS, default 6, of one core each, then exiting 0; restart: Never), every
unit with the default resources (cpu 0.25, memory 512M). Two arrival patterns
(KEEL_BENCH_BURST_EVERY, default "0,3"): the bursts at once with the agents, and one burst
every 3 s. For each, two runs on the real daemon (real cgroups, as root), each on a scratch
state directory and cgroup tree of its own: pressure-aware admission with the default
thresholds and pacing (`pressure: Pressure(cpu: 40.0, memory: 10.0, io: 40.0, settle: "5s")`:
near a threshold, one start per 5 s) and the baseline
`pressure: Off` (admission by requests alone). keel.ron's capacity admits all 24 by their
requests (6 CPU, 12G requested) in both, so pressure is the only thing that differs. Sampled
every 0.5 s until every burst succeeded (or a timeout): the tasks running and queued (those
whose reason is a pressure wait, and those paced, apart), PSI `some avg10` of CPU and memory from the files keel
reads (its tree's `tasks/cpu.pressure`, `tasks/memory.pressure` in the v2 hierarchy), and the
host's /proc/pressure/cpu beside them.
"""
import json, os, resource, shutil, subprocess, tempfile, time

IDLE, BURSTS = 12, 12
CAPACITY = 'capacity: Capacity(cpu: 6.0, memory: "12G")'
CONFIGS = (("pressure", 'pressure: Pressure(cpu: 40.0, memory: 10.0, io: 40.0, settle: "5s")'),
           ("off", "pressure: Off"))
SAMPLE_S = 0.5
LOOP = "i=0; while [ $i -lt {n} ]; do i=$((i+1)); done"


def calibrate(seconds):
    """Iterations of LOOP that take `seconds` of one core (the shell's own CPU time, so the
    host's other work does not shorten the bursts)."""
    n = 300_000
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["/bin/sh", "-c", LOOP.format(n=n)], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return max(1, int(n * seconds / max(cpu, 1e-3)))


def some_avg10(path):
    try:
        for line in open(path):
            if line.startswith("some "):
                return float(line.split()[1].split("=")[1])
    except OSError:
        pass
    return None


def write_unit(units, name, text):
    tmp = os.path.join(units, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(units, f"{name}.ron"))


def one_run(keel_bin, v2_base, label, pressure, iterations, every, timeout):
    """One daemon, the 24 units, samples until the bursts are done; cleans up after itself."""
    work = tempfile.mkdtemp(prefix=f"keel-bench-admission-{label}-")
    state, units = os.path.join(work, "state"), os.path.join(work, "units")
    os.makedirs(state)
    os.makedirs(units)
    with open(os.path.join(state, "keel.ron"), "w") as f:
        f.write(f"Config({CAPACITY}, {pressure})")
    tree = f"keel-bench-adm-{os.getpid()}-{label}"
    tasks_dir = os.path.join(v2_base, tree, "tasks")
    keel = lambda *args: subprocess.run([keel_bin, "--state", state, *args],
                                        capture_output=True, text=True)
    log = open(os.path.join(work, "daemon.log"), "w")
    daemon = subprocess.Popen([keel_bin, "daemon", "--state", state, "--units", units,
                               "--cgroup-name", tree], stderr=log)
    samples, started, finished, arrived = [], {}, {}, {}
    try:
        deadline = time.monotonic() + 30
        while keel("health").returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"admission: the daemon did not come up ({work}/daemon.log)")
            time.sleep(0.05)
        burst = LOOP.format(n=iterations)
        burst = f"{burst} & {burst} & wait"
        t0 = time.monotonic()
        for i in range(IDLE):
            write_unit(units, f"agent{i:02d}",
                       'Unit(command: ["sleep", "3600"], stop: Stop(timeout: "2s"))')
        pending = [(i * every, f"burst{i:02d}") for i in range(BURSTS)]
        end = t0 + timeout
        next_at = t0
        while time.monotonic() < end:
            while pending and time.monotonic() - t0 >= pending[0][0]:
                arrived[pending[0][1]] = time.monotonic() - t0
                write_unit(units, pending.pop(0)[1],
                           f'Unit(command: ["/bin/sh", "-c", "{burst}"], restart: Never, '
                           'stop: Stop(timeout: "2s"))')
            out = keel("status", "--json")
            tasks = json.loads(out.stdout)["tasks"] if out.returncode == 0 else []
            now = time.monotonic() - t0
            row = {"t": now, "agents": 0, "bursts": 0, "queued": 0, "on_pressure": 0, "paced": 0,
                   "bursts_queued": 0,
                   "done": 0, "failed": 0,
                   "cpu": some_avg10(os.path.join(tasks_dir, "cpu.pressure")),
                   "memory": some_avg10(os.path.join(tasks_dir, "memory.pressure")),
                   "host_cpu": some_avg10("/proc/pressure/cpu")}
            for t in tasks:
                unit, st = t["unit"], t["state"]
                if st in ("running", "starting"):
                    row["agents" if unit.startswith("agent") else "bursts"] += 1
                    started.setdefault(unit, now)
                elif st == "queued":
                    row["queued"] += 1
                    reason = t.get("reason") or ""
                    row["paced"] += reason.startswith("pacing:")
                    row["on_pressure"] += "pressure" in reason and not reason.startswith("pacing:")
                    row["bursts_queued"] += unit.startswith("burst")
                elif unit.startswith("burst") and st == "succeeded":
                    row["done"] += 1
                    started.setdefault(unit, now)
                    finished.setdefault(unit, now)
                elif unit.startswith("burst") and st in ("failed", "stopped"):
                    row["failed"] += 1
            samples.append(row)
            if row["done"] + row["failed"] == BURSTS:
                break
            next_at += SAMPLE_S
            time.sleep(max(0.0, next_at - time.monotonic()))
        return samples, started, finished, arrived
    finally:
        keel("shutdown")
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()  # the daemon this run started, by its pid
            daemon.wait()
        log.close()
        if os.path.isdir(os.path.join(v2_base, tree)):
            print(f"  (admission: the daemon left {os.path.join(v2_base, tree)} behind; "
                  f"log: {work}/daemon.log)")
        else:
            shutil.rmtree(work, ignore_errors=True)


def summary(samples, started, finished, arrived):
    last = samples[-1]
    cpu = [s["cpu"] for s in samples if s["cpu"] is not None]
    mem = [s["memory"] for s in samples if s["memory"] is not None]
    runs = [finished[u] - started[u] for u in finished if u in started]
    waits = [started[u] - arrived[u] for u in started if u in arrived]
    agents_at = next((s["t"] for s in samples if s["agents"] == IDLE), None)
    burst_starts = [started[u] for u in started if u.startswith("burst")]
    return {
        "bursts_done": last["done"], "failed": last["failed"],
        "all_done_s": last["t"] if last["done"] == BURSTS else None,
        "peak_cpu": max(cpu, default=0.0), "mean_cpu": sum(cpu) / max(1, len(cpu)),
        "peak_memory": max(mem, default=0.0),
        "peak_bursts": max(s["bursts"] for s in samples),
        # Bursts first seen running in the same 0.5 s sample: the largest batch released.
        "burst_batch": max((burst_starts.count(t) for t in burst_starts), default=0),
        "peak_running": max(s["agents"] + s["bursts"] for s in samples),
        "held_s": SAMPLE_S * sum(1 for s in samples if s["on_pressure"]),
        "paced_s": SAMPLE_S * sum(1 for s in samples if s["paced"]),
        "idle_gap_s": SAMPLE_S * sum(1 for s in samples
                                     if s["bursts"] == 0 and s["bursts_queued"]),
        "burst_run_mean": sum(runs) / max(1, len(runs)), "burst_run_max": max(runs, default=0),
        "burst_wait_mean": sum(waits) / max(1, len(waits)),
        "burst_wait_max": max(waits, default=0),
        "burst_total": (sum(finished[u] - arrived[u] for u in finished)
                        if len(finished) == BURSTS else None),
        "agents_all_running_s": agents_at,
    }


def plot(samples, width=72, height=13):
    """Text plot: `*` cpu pressure (%, left scale), `o` tasks running (right scale, 24 at the
    top), `+` both in one cell."""
    span = max(1.0, samples[-1]["t"])
    grid = [[" "] * width for _ in range(height)]
    def put(col, value, top, mark):
        row = height - 1 - min(height - 1, int(value / top * (height - 1) + 0.5))
        grid[row][col] = "+" if grid[row][col] not in (" ", mark) else mark
    for s in samples:
        col = min(width - 1, int(s["t"] / span * (width - 1)))
        if s["cpu"] is not None:
            put(col, s["cpu"], 100.0, "*")
        put(col, s["agents"] + s["bursts"], float(IDLE + BURSTS), "o")
    lines = []
    for r, cells in enumerate(grid):
        frac = (height - 1 - r) / (height - 1)
        lines.append(f"{frac * 100:4.0f}% |{''.join(cells)}| {frac * (IDLE + BURSTS):4.1f}")
    lines.append("      +" + "-" * width + "+")
    lines.append(f"       0 s{'':{width - 14}}{span:4.0f} s")
    return lines


def scenario(keel_bin, v2_base, every, iterations, timeout):
    """Both configurations for one arrival pattern: the table, the plot, the summary."""
    results = {}
    for label, pressure in CONFIGS:
        samples, started, finished, arrived = one_run(keel_bin, v2_base, label, pressure,
                                                      iterations, every, timeout)
        results[label] = summary(samples, started, finished, arrived)
        step = int(round(4 / SAMPLE_S))
        print(f"\n  {label} ({pressure}), every {step}th sample:")
        print("      t  agents bursts queued (pressure) (paced) done   cpu%   mem%  host cpu%")
        fmt = lambda v: "   -  " if v is None else f"{v:6.2f}"
        for s in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
            print(f"  {s['t']:5.1f}  {s['agents']:6d} {s['bursts']:6d} {s['queued']:6d} "
                  f"{s['on_pressure']:10d} {s['paced']:7d} {s['done']:4d} {fmt(s['cpu'])} "
                  f"{fmt(s['memory'])} "
                  f"{fmt(s['host_cpu'])}")
        print(f"\n  {label}: the tree's cpu pressure `*` (% left), tasks running `o` (right):")
        for line in plot(samples):
            print("  " + line)
    print(f"\n  {'':44} pressure        off")
    rows = (("all bursts done (s)", "all_done_s"), ("peak cpu pressure %", "peak_cpu"),
            ("mean cpu pressure %", "mean_cpu"), ("peak memory pressure %", "peak_memory"),
            ("peak bursts running", "peak_bursts"),
            ("most bursts started in one 0.5 s sample", "burst_batch"), ("peak tasks running", "peak_running"),
            ("time with a task waiting on pressure (s)", "held_s"),
            ("time with a task paced (s)", "paced_s"),
            ("time with bursts queued, none running (s)", "idle_gap_s"),
            ("burst arrival → running, mean (s)", "burst_wait_mean"),
            ("burst arrival → running, max (s)", "burst_wait_max"),
            ("burst running, mean (s)", "burst_run_mean"),
            ("burst running, max (s)", "burst_run_max"),
            ("burst arrival → done, sum over bursts (s)", "burst_total"),
            ("all 12 agents running at (s)", "agents_all_running_s"))
    for name, key in rows:
        cell = lambda label: "-" if results[label][key] is None else f"{results[label][key]:.1f}"
        print(f"  {name:44} {cell('pressure'):>8} {cell('off'):>10}")
    on, off = results["pressure"], results["off"]
    done = lambda r: "not all" if r["all_done_s"] is None else f"{r['all_done_s']:.0f} s"
    print(f"  summary: pressure: bursts done in {done(on)}, peak cpu pressure "
          f"{on['peak_cpu']:.1f}%, mean {on['mean_cpu']:.1f}%, at most {on['peak_bursts']} "
          f"bursts at once; off: {done(off)}, {off['peak_cpu']:.1f}%, mean "
          f"{off['mean_cpu']:.1f}%, {off['peak_bursts']} at once")
    if on["failed"] or off["failed"]:
        raise SystemExit("admission: a burst failed")


def admission(keel_bin, v2_base):
    seconds = float(os.environ.get("KEEL_BENCH_BURST_SECONDS", "6"))
    arrivals = [float(a) for a in os.environ.get("KEEL_BENCH_BURST_EVERY", "0,3").split(",")]
    iterations = calibrate(seconds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            capture_output=True, text=True).stdout.strip()
    # The bursts' work on every CPU, four times over, and a minute: a run that takes longer
    # has gone wrong.
    timeout = max(120.0, 4 * BURSTS * 2 * seconds / os.cpu_count() + 60)
    for every in arrivals:
        arrival = "all at once" if not every else f"a burst every {every:g} s"
        print(f"admission under pressure, {IDLE} idle agents at once + {BURSTS} bursts "
              f"{arrival} (2 busy loops of {seconds:g} s of one core each: {iterations} shell "
              f"iterations), default resources, {os.cpu_count()} CPUs, commit {commit}, "
              f"load {os.getloadavg()[0]:.2f}:")
        scenario(keel_bin, v2_base, every, iterations, timeout)
        print()
