//! A task's life in the daemon: the scheduler's round and the start of an attempt. Its
//! transitions (persisted before they are acted on) are `store::transition`; the end of an
//! attempt is in `settle.rs`, stopping in `stopping.rs`, recovery after a daemon restart in
//! `recovery.rs`.

use super::jobs::{JobError, Owner, Pending, Then};
use super::queue::{QueuedTask, Reservation};
use super::record::TaskRecord;
use super::record::{Ending, Intent, ShimIdentity, TaskState};
use super::slices::{self, SliceProblem};
use super::spawn::{self, AttemptContext, SpawnError};
use super::store::{transition, Store};
use super::task::PendingStart;
use super::timers::{Timer, Timers};
use super::{checkouts, id_blocks, liveness, network, Daemon, Task};
use crate::config::UserNamespaces;
use crate::sandbox::spec::IdBlock;
use crate::state::{self, now_ms};
use crate::worker::protocol::{Job, JobResult, QuotaAsk, RepoRef, StartPaths};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long to wait before trying again to start a task whose start could not be persisted.
const START_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between two retries of a start deferred again and again.
const START_RETRY_MAX: Duration = Duration::from_secs(300);

/// How long a start deferred `deferrals` times in a row waits before its next try: 5 s,
/// doubled each time up to 5 minutes (a worker killed by the OOM killer every time must not
/// rebuild a large base every 5 s for ever; a passing problem is retried soon).
pub(crate) fn deferral_delay(deferrals: u32) -> Duration {
    START_RETRY
        .saturating_mul(1u32 << deferrals.min(16))
        .min(START_RETRY_MAX)
}
/// How soon a start waiting for the previous attempt's cgroup to empty is tried again.
const SLICE_BUSY_RETRY: Duration = Duration::from_millis(20);

/// Undo an undecided start: the task stays queued and is retried after `START_RETRY`. The
/// record on disk was not changed (or the change did not take): memory goes back to it.
fn defer_start(
    task: &mut Task,
    before: TaskRecord,
    why: &str,
    store: &mut Store,
    timers: &mut Timers,
) {
    let reason = format!("start deferred: {why}");
    let repeated = before.reason.as_deref() == Some(reason.as_str());
    task.record = before;
    task.record.reason = Some(reason);
    let delay = deferral_delay(task.start_deferrals);
    task.start_deferrals = task.start_deferrals.saturating_add(1);
    task.start_retry_at = Some(Instant::now() + delay);
    if !repeated {
        log::error!("{}: start deferred: {why}", task.name);
        store.task_event(task, "start-deferred", why);
    }
    timers.add_after(delay, Timer::Schedule);
}

impl Daemon {
    /// Start every queued task the scheduler allows.
    pub(crate) fn schedule(&mut self) {
        self.sync_id_claims();
        if self.shutdown.is_some() {
            return;
        }
        // `after: [...]`: a task goes to the scheduler once each unit named there succeeded.
        // Held back, a task has not waited for the scheduler yet: its starvation clock starts
        // when the gate opens.
        let held = self.dependency_holds();
        let now = now_ms();
        for (unit, why) in held.iter() {
            self.note_waiting(unit, why.clone());
            if let Some(task) = self.tasks.get_mut(unit) {
                task.queued_since_ms = now;
            }
        }
        let queued: Vec<QueuedTask> = self
            .tasks
            .values()
            .filter(|t| t.record.state == TaskState::Queued && t.seen_file)
            .filter(|t| t.start_retry_at.is_none_or(|at| at <= Instant::now()))
            .filter(|t| !held.contains_key(&t.name))
            .filter_map(|t| {
                let unit = t.unit.as_ref()?;
                Some(QueuedTask {
                    unit: t.name.clone(),
                    priority: unit.priority,
                    submitted_ms: t.record.submitted_ms,
                    queued_since_ms: t.queued_since_ms,
                    reservation: Reservation::of(&unit.resources),
                })
            })
            .collect();
        // What live attempts hold: the unit they started with (an edit applies at the next
        // start), or for an adopted attempt the unit as it is now. A paused (frozen) attempt
        // holds its memory but no CPU.
        let running: Vec<Reservation> = self
            .tasks
            .values()
            .filter(|t| t.record.state.has_attempt())
            .map(preempting::held)
            .collect();
        // `keel pause --all`, or keel.ron `disk_reserve` while the state filesystem is short
        // of it: nothing starts (and keel resumes nothing it preempted).
        let hold = (self.starts_held.as_deref().map(super::start_hold::reason))
            .map(|text| (text, "pause-all"))
            .or_else(|| self.disk_reserve_hold().map(|text| (text, "disk-reserve")));
        if let Some((text, key)) = hold {
            let reason = super::queue::WaitReason::Held {
                text,
                key: key.to_string(),
            };
            for task in &queued {
                self.note_waiting(&task.unit, reason.clone());
            }
            return;
        }
        // A task keel preempted resumes before any task of its priority or lower starts in
        // the CPU it left (else a stream of those would keep it frozen).
        let queued = self.behind_preempted(queued);
        let pressure = self.pressure_check(queued.is_empty());
        let decision = super::queue::decide(
            &queued,
            &running,
            preempting::slotless(self.tasks.values()),
            &self.settings.config.capacity,
            now_ms(),
            self.settings.config.starvation_limit_ms(),
            &pressure,
        );
        self.recheck_while_pressed(&decision);
        self.preempt(&decision, &queued, &pressure);
        for (unit, why) in decision.waiting {
            self.note_waiting(unit, why);
        }
        for unit in decision.start {
            self.start_attempt(unit);
        }
    }

    /// Decide (generation + 1, state `starting`), persist, then spawn the shim. If the decision
    /// cannot be persisted, nothing is spawned: a new generation that is not on disk could be
    /// handed out twice after a crash.
    pub(crate) fn start_attempt(&mut self, unit: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let (Some(unit_def), Some(text)) = (task.unit.clone(), task.unit_text.clone()) else {
            return;
        };
        if crate::state::attempt_lock_held(&self.store.dirs.run_dir(unit)) {
            // A shim of an earlier attempt is still alive (not ours to watch: it will be
            // adopted, or it is ending). Never two live attempts: try again later.
            let before = task.record.clone();
            let why = "a shim of an earlier attempt still holds run/attempt.lock";
            defer_start(task, before, why, &mut self.store, &mut self.events.timers);
            return;
        }
        // A secret of keel's environment that is not there: the host's to set, not the
        // attempt's failure (no attempt, nothing counted against its restart limit).
        let problem = (spawn::env_secret_problem(&unit_def))
            .or_else(|| network::authority_problem(&self.store.dirs.root, &unit_def));
        if let Some(why) = problem {
            let before = task.record.clone();
            defer_start(task, before, &why, &mut self.store, &mut self.events.timers);
            return;
        }
        // The units directory (outside the state directory) is hidden from a sandbox only if
        // it exists as the sandbox is built: moved away or removed, starts wait for it to be
        // back (an agent started meanwhile would see it appear, other tasks' units and their
        // environment in it). The host's to fix: blocked, never counted.
        let units_dir = &self.units.dir;
        if !units_dir.starts_with(&self.store.dirs.root) && !units_dir.exists() {
            let why = format!(
                "the units directory {} is missing (moved or removed): starts wait until it is \
                 back, so that the agent cannot see it",
                units_dir.display()
            );
            let before = task.record.clone();
            blocked::block_start(task, before, &why, &mut self.store, &mut self.events.timers);
            return;
        }
        // A `sandbox.user` this host does not have: the host's to create, not the attempt's
        // failure; the task waits, blocked, until it exists.
        if let Some(why) = blocked::missing_user(&unit_def) {
            let before = task.record.clone();
            blocked::block_start(task, before, &why, &mut self.store, &mut self.events.timers);
            return;
        }
        // Chosen (and claimed host-wide) once no earlier shim can hold the task's claim.
        let id_block = self.id_block_for(unit);
        let quota = self.quota_ask_for(unit, unit_def.resources.disk.map(|s| s.0));
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        // Every block of host ids held: the host's limit, not the task's failure (no attempt,
        // nothing counted against its restart limit); it starts once a task is removed.
        let id_block = match id_block {
            Ok(block) => block,
            Err(why) => {
                let before = task.record.clone();
                defer_start(task, before, &why, &mut self.store, &mut self.events.timers);
                return;
            }
        };
        // Held in memory at once (persisted with the decision below): a start that waits for
        // its cgroup keeps the block it just claimed rather than give it back at every retry.
        task.record.id_block = id_block;
        // The attempt's cgroup, before the decision: one still emptying defers the start.
        let prepared = match blocked::test_refuses_slice() {
            Some(why) => Err(SliceProblem::Failed(why)),
            None => slices::prepare_slice(&self.slices, unit, &unit_def),
        };
        let slice = match prepared {
            Ok(slice) => slice,
            Err(SliceProblem::Busy(why)) => {
                // The previous attempt's killed processes are still exiting (milliseconds,
                // unless one is stuck in the kernel): look again soon; status says why.
                log::debug!("{unit}: start waits: {why}");
                task.start_retry_at = Some(Instant::now() + SLICE_BUSY_RETRY);
                task.waiting = Some(super::queue::WaitReason::Start(why));
                self.events
                    .timers
                    .add_after(SLICE_BUSY_RETRY, Timer::Schedule);
                return;
            }
            // No cgroup for it (cgroups unavailable, a limit the kernel refuses): never
            // unconfined, and never the task's failure: it waits, blocked, for the host.
            Err(SliceProblem::Failed(why)) => {
                let before = task.record.clone();
                let (store, timers) = (&mut self.store, &mut self.events.timers);
                blocked::block_start(task, before, &why, store, timers);
                return;
            }
        };
        let before = task.record.clone();
        task.record.generation += 1;
        task.record.attempt += 1;
        task.record.started_ms = Some(now_ms());
        task.record.finished_ms = None;
        task.record.backoff_until_ms = None;
        task.record.shim = None;
        task.record.intent = Intent::None;
        task.record.stop_started_ms = None;
        task.record.reason = None;
        task.record.new_attempt_clocks();
        // Persisted with the decision, before the spawn maps it (`None`: user namespaces off).
        task.record.id_block = id_block;
        // Persisted with the decision, before a worker gives the task's directories the id:
        // a later daemon never hands it to another task.
        if let Some(ask) = &quota {
            task.record.quota_project = Some(ask.project);
        }
        task.record.quota_generation = None;
        task.start_retry_at = None;
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        let last_exit = task.record.last_exit.map(|e| e.to_string());

        task.record.state = TaskState::Starting;
        // Decided, in memory only: a death here must leave the task queued as it was.
        state::crash_point("after-decide");
        // Decide, persist, then (only then) say so and act.
        let persisted = self
            .store
            .dirs
            .create_task_dirs(unit)
            .map_err(|e| format!("cannot create the task's directories: {e}"))
            .and_then(|()| {
                self.store
                    .persist(task)
                    .map_err(|e| format!("cannot persist the start: {e}"))
            });
        if let Err(why) = persisted {
            defer_start(task, before, &why, &mut self.store, &mut self.events.timers);
            return;
        }
        self.store
            .task_event(task, "starting", &format!("attempt {attempt}"));
        log::info!("{unit}: starting (attempt {attempt})");
        self.pressure.note_start();
        state::crash_point("after-persist-starting");
        task.started_at = Some(Instant::now());
        task.accepted_text = Some(text.clone());
        task.reserved = Some(Reservation::of(&unit_def.resources));
        task.cpu_samples.set((None, None));
        task.last_oom_ms = None;
        task.keel_kill_ms = None;
        // A restart of an unchanged unit finds its copy already there: no second durable
        // write (a temporary file, two fsyncs and a rename: milliseconds on a slow disk).
        let accepted_path = self.store.dirs.accepted_unit_path(unit);
        let kept = std::fs::read(&accepted_path).is_ok_and(|held| held == text.as_bytes());
        if !kept {
            if let Err(e) = state::atomic_write(&accepted_path, text.as_bytes()) {
                log::warn!("{unit}: cannot keep a copy of the accepted unit: {e}");
            }
        }
        let run_dir = self.store.dirs.run_dir(unit);
        let ctx = AttemptContext {
            unit_name: unit,
            attempt,
            generation,
            last_exit,
            last_progress: spawn::last_progress_line(&run_dir),
            network_lists: &self.settings.config.network.lists,
        };
        let mut attempt_spec = spawn::attempt_spec(&self.store.dirs, &unit_def, &ctx);
        if let Some(sandbox) = attempt_spec.sandbox.as_mut() {
            sandbox.id_block = task.record.id_block;
            sandbox.keel_dirs.units = Some(self.units.dir.clone());
            // Unit files hold other tasks' settings (and their env: API keys).
            if !self.units.dir.starts_with(&self.store.dirs.root) {
                sandbox.hidden.push(self.units.dir.clone());
            }
        }
        attempt_spec.cgroup_v1_procs = slice.v1_procs.clone();
        let pending = PendingStart {
            before,
            spec: attempt_spec,
            cgroup_dir: slice.v2_dir,
            unit_def,
        };
        // What takes time that keel does not control (a checkout, a base tree, the paths the
        // unit names) is a job: the start goes on when it is done (`finish_start`).
        match preparation_job(
            unit,
            &pending.unit_def,
            pending.spec.sandbox.as_ref(),
            quota,
        ) {
            Ok(None) => self.spawn_attempt(unit, pending),
            Ok(Some(job)) => {
                log::info!("{unit}: preparing: {}", job.describe());
                task.preparing = Some(Box::new(pending));
                let submitted = Pending {
                    generation,
                    job,
                    then: Then::Start,
                };
                self.jobs.submit(Owner::Task(unit.to_string()), submitted);
            }
            Err(why) => self.fail_spawn(unit, why),
        }
    }

    /// The preparation job of `unit`'s attempt `generation` has ended: spawn the attempt with
    /// its checkout, or fail it (the unit's mistake, a job past its deadline), or defer it
    /// (the host's problem: a worker that could not run). A result for another generation,
    /// or for a start since stopped, is dropped.
    pub(crate) fn finish_start(
        &mut self,
        unit: &str,
        generation: u64,
        outcome: Result<JobResult, JobError>,
    ) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let current = (task.record.state == TaskState::Starting && task.preparing.is_some())
            .then_some(task.record.generation);
        if !super::jobs::queue::applies(generation, current) {
            log::info!(
                "{unit}: preparation result of generation {generation} dropped (the task is {} \
                 at generation {})",
                task.record.state,
                task.record.generation
            );
            return;
        }
        let Some(mut pending) = task.preparing.take() else {
            return;
        };
        let (attempt, generation) = (task.record.attempt, task.record.generation);
        match outcome {
            // A secret file that cannot be read as it is (missing, loose, another owner's):
            // the operator's to fix; the start waits for it, nothing counted against the task.
            Ok(JobResult::Prepared { findings, .. }) if !findings.secrets.is_empty() => {
                self.defer_prepared_start(unit, *pending, &findings.secrets.join("; "));
            }
            Ok(JobResult::Prepared {
                checkout,
                findings,
                quota,
            }) => {
                self.note_quota_applied(unit, generation, quota);
                if let Some(sandbox) = pending.spec.sandbox.as_mut() {
                    sandbox.findings = Some(findings);
                }
                if let Some(prepared) = checkout {
                    let repo = pending
                        .unit_def
                        .repo
                        .as_ref()
                        .map_or("", |r| r.path.as_str());
                    checkouts::journal_prepared(
                        &mut self.store,
                        unit,
                        (attempt, generation),
                        repo,
                        &prepared,
                    );
                    if let Some(sandbox) = pending.spec.sandbox.as_mut() {
                        sandbox.checkout = Some(prepared.mounts);
                    }
                }
                self.spawn_attempt(unit, *pending);
            }
            Ok(other) => {
                let why = format!("the preparation job answered {other:?}");
                self.defer_prepared_start(unit, *pending, &why);
            }
            Err(JobError::Failed(failure)) if failure.unit_mistake => {
                self.fail_spawn(unit, failure.message)
            }
            // What the data takes (a tree too big for the deadline) fails the attempt, with
            // the step, the path and how far it came; its restart policy decides the rest.
            Err(JobError::Deadline(message)) => self.fail_spawn(unit, message),
            Err(e) => self.defer_prepared_start(unit, *pending, &e.to_string()),
        }
    }

    /// A prepared start that cannot go on for a reason of the host's: the task is queued
    /// again as it was before the decision (its generation stays spent), retried later, and
    /// nothing counts against its restart limit.
    fn defer_prepared_start(&mut self, unit: &str, pending: PendingStart, why: &str) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let generation = task.record.generation;
        self.store.task_event(task, "start-abandoned", why);
        defer_start(
            task,
            pending.before,
            why,
            &mut self.store,
            &mut self.events.timers,
        );
        task.record.generation = generation;
        if let Err(e) = self.store.persist(task) {
            log::error!("{unit}: cannot record the deferred start: {e}");
        }
    }

    /// The second step of a start: spawn the shim of the decided attempt.
    fn spawn_attempt(&mut self, unit: &str, pending: PendingStart) {
        let Some(task) = self.tasks.get_mut(unit) else {
            return;
        };
        let PendingStart {
            before,
            spec: attempt_spec,
            cgroup_dir,
            unit_def: _,
        } = pending;
        // The shim inherits the daemon's claim on the block: held while the task's processes
        // use its ids, even if this daemon dies meanwhile.
        let id_claim = (self.id_claims.as_ref())
            .zip(task.record.id_block)
            .and_then(|(claims, block)| claims.held(unit).filter(|c| c.block() == block))
            .map(|claim| claim.fd());
        let block = attempt_spec.sandbox.as_ref().and_then(|s| s.id_block);
        let userns = user_namespace_for(task, block, &mut self.sandboxing);
        // The attempt's network namespace (owned by the task's user namespace) and, for
        // `Allow`, its relay, in the task's cgroup: before the shim, so that the agent's
        // first packet has somewhere to go. A host that cannot make one defers the start
        // (never a silent fall back to the host's network).
        let network_ctx = network::NetworkContext {
            unit,
            run_dir: &attempt_spec.run_dir,
            resolver: self.settings.config.network.resolver,
            cgroup: Some(cgroup_dir.as_fd()),
            v1_procs: &attempt_spec.cgroup_v1_procs,
            secrets: (attempt_spec.sandbox.as_ref()).map_or(&[], |s| &s.secrets[..]),
            state_root: &self.store.dirs.root,
            trust: &self.settings.config.network.trust,
        };
        let task_network = match attempt_spec.sandbox.as_ref() {
            Some(sandbox) => network::start(&sandbox.network, userns, &network_ctx),
            None => Ok(None),
        };
        let mut task_network = match task_network {
            Ok(network) => network,
            Err(why) => {
                log::error!("{unit}: cannot start: {why}");
                defer_start(task, before, &why, &mut self.store, &mut self.events.timers);
                let _ = self.store.persist(task);
                return;
            }
        };
        let templates = Some(&mut self.sandboxing.templates);
        let cgroup = Some(cgroup_dir.as_fd());
        let namespaces = spawn::TaskNamespaces {
            userns,
            netns: task_network.as_ref().map(|n| n.netns.as_fd()),
        };
        match spawn::spawn_shim(&attempt_spec, cgroup, id_claim, templates, namespaces) {
            Ok((pid, pidfd)) => {
                let has_relay = task_network.as_ref().is_some_and(|n| n.has_relay());
                if has_relay && !self.network_look_armed {
                    self.network_look_armed = true;
                    (self.events.timers).add_after(network::CHECK_EVERY, Timer::Network);
                }
                task.network = task_network.take();
                state::crash_point("after-spawn");
                // The next spare is made for this task's restart (its user namespace's).
                let userns = block
                    .and(task.user_namespace.as_ref())
                    .map(|(_, ns)| ns.as_fd());
                let sandboxed = attempt_spec.sandbox.is_some();
                let timers = &mut self.events.timers;
                self.sandboxing.after_start(sandboxed, userns, timers);
                let shim = self.events.watch_shim(unit, pid, pidfd);
                let start_time = crate::sys::process_start_time(pid).unwrap_or(0);
                task.record.shim = Some(ShimIdentity {
                    pid,
                    start_time,
                    boot_id: self.instance.boot_id.clone(),
                });
                task.shim = Some(shim);
                task.start_deferrals = 0;
                transition(
                    task,
                    TaskState::Running,
                    &format!("shim pid {pid}"),
                    &mut self.store,
                );
                slices::watch_oom(task, &self.slices, &mut self.events);
                self.liveness
                    .watch(task, &self.store.dirs, &self.slices, false);
                let timers = &mut self.events.timers;
                liveness::check_liveness(task, &mut self.liveness, &mut self.store, timers);
                super::runtime_limit::arm(task, timers);
            }
            Err(SpawnError::PreviousShimAlive) => {
                // Never two live attempts: wait for the old shim (its pidfd is not ours, or
                // it would not be running) and try again.
                let why = SpawnError::PreviousShimAlive.to_string();
                defer_start(task, before, &why, &mut self.store, &mut self.events.timers);
                // `starting` reached the disk: put the record back as it was.
                let _ = self.store.persist(task);
            }
            // The unit's own mistake (its command, its paths): failed to spawn, as the
            // agent's missing binary is.
            Err(SpawnError::Launch(why)) => self.fail_spawn(unit, why),
            // The host's (a user it does not have, a privilege or a resource it refuses):
            // nothing counted against the task; it waits, blocked.
            Err(e) if blocked::refused_by_host(&e) => {
                slices::release_slice(task, &self.slices, &mut self.events);
                let (store, timers) = (&mut self.store, &mut self.events.timers);
                blocked::block_start(task, before, &e.to_string(), store, timers);
            }
            Err(e) => {
                let why = e.to_string();
                log::error!("{unit}: cannot start: {why}");
                self.store.task_event(task, "start-failed", &why);
                self.settle(unit, Ending::lost(why));
            }
        }
        // No shim took the attempt's network: its relay goes now (not at the next start).
        if let Some(network) = task_network {
            network.kill_relay();
        }
    }

    /// The block of host ids `unit`'s next attempt maps, claimed host-wide: the one it holds,
    /// else the lowest no other task holds and no other daemon's claim covers; `Ok(None)`
    /// with `user_namespaces: Off`. `Err`: why the start waits.
    fn id_block_for(&mut self, unit: &str) -> Result<Option<IdBlock>, String> {
        let UserNamespaces::On(range) = &self.settings.config.user_namespaces else {
            return Ok(None);
        };
        let holding = self.tasks.get(unit).and_then(|t| t.record.id_block);
        let others: Vec<IdBlock> = self
            .tasks
            .values()
            .filter(|t| t.name != unit)
            .filter_map(|t| t.record.id_block)
            .collect();
        let Some(claims) = self.id_claims.as_mut() else {
            // A daemon without claims (one that is not root: id_blocks::open_claims).
            return id_blocks::block_for_start(range, holding, &others)
                .map(Some)
                .map_err(|exhausted| exhausted.to_string());
        };
        let mut failure = None;
        let chosen = id_blocks::choose_block(range, holding, &others, |block| {
            match claims.claim_for(unit, block) {
                Ok(claimed) => claimed,
                Err(e) => {
                    failure.get_or_insert(e);
                    false
                }
            }
        });
        match (chosen, failure) {
            (Ok(block), _) => {
                if let Some(held) = holding.filter(|held| *held != block) {
                    log::warn!(
                        "{unit}: takes the block of host ids from {} (its block from {} is \
                         claimed elsewhere on this host, or no longer of keel.ron's range)",
                        block.first,
                        held.first
                    );
                }
                Ok(Some(block))
            }
            (Err(_), Some(e)) => Err(format!(
                "cannot claim a block of host ids in {}: {e}",
                claims.file().path().display()
            )),
            (Err(exhausted), None) => Err(exhausted.to_string()),
        }
    }

    /// [`id_blocks::claims::Claims::sync`] with every task: a removed task's claim goes; a
    /// kept block is claimed again (after a restart, or once a re-adopted attempt ended).
    fn sync_id_claims(&mut self) {
        let Some(claims) = self.id_claims.as_mut() else {
            return;
        };
        claims.sync(self.tasks.values().map(|t| id_blocks::claims::TaskBlock {
            unit: &t.name,
            block: t.record.id_block,
            attempt_live: t.record.state.has_attempt(),
        }));
    }

    /// The attempt could not start for a reason of the unit's (its checkout, its sandbox):
    /// journaled, and settled as `spawn-failed` with the reason.
    fn fail_spawn(&mut self, unit: &str, why: String) {
        log::error!("{unit}: cannot start: {why}");
        if let Some(task) = self.tasks.get(unit) {
            self.store.task_event(task, "start-failed", &why);
        }
        self.settle(unit, Ending::spawn_failed(why));
    }
}

/// The job that prepares `unit`'s attempt, if it needs one: the unit's checkout (`repo`), and
/// the `lstat` of every path its sandbox names (`writable`, `hidden`), whose findings the
/// start's resolution then uses instead of reading them itself (a path on a filesystem that
/// does not answer must hang a worker, not the loop). `Err`: the unit's mistake.
fn preparation_job(
    unit: &str,
    unit_def: &crate::unit::Unit,
    sandbox: Option<&crate::sandbox::spec::SandboxSpec>,
    quota: Option<QuotaAsk>,
) -> Result<Option<Job>, String> {
    let names_paths = !unit_def.sandbox.writable.is_empty()
        || !unit_def.sandbox.hidden.is_empty()
        || unit_def.secrets.values().any(|s| s.file.is_some());
    if unit_def.repo.is_none() && !(names_paths && sandbox.is_some()) && quota.is_none() {
        return Ok(None);
    }
    let owner = match unit_def.repo {
        Some(_) => checkouts::agent_owner(unit_def)?,
        None => None,
    };
    let paths = sandbox.map_or_else(StartPaths::default, |s| StartPaths {
        hidden: s.hidden.clone(),
        writable: s.writable.clone(),
        keel_dirs: s.keel_dirs.clone(),
        secret_files: (s.secrets.iter())
            .filter_map(|secret| match &secret.source {
                crate::secrets::SecretSource::File(path) => {
                    Some((secret.name.clone(), path.clone()))
                }
                crate::secrets::SecretSource::Env(_) => None,
            })
            .collect(),
    });
    Ok(Some(Job::Prepare {
        unit: unit.to_string(),
        repo: unit_def.repo.as_ref().map(|r| RepoRef {
            path: r.path.clone(),
            base: r.base.clone(),
            branch: r.branch.clone(),
        }),
        owner,
        paths,
        quota: quota.map(Box::new),
    }))
}

/// The task's user namespace for `block`: the one this daemon made for it before, or made
/// now (and kept). `None` without a block, or when the kernel refuses one now (the shim's
/// clone then tries itself, and its failure is the attempt's, with the reason). One made for
/// another block is no task's any more: a spare made for it goes (`sandboxing`).
fn user_namespace_for<'t>(
    task: &'t mut Task,
    block: Option<crate::sandbox::spec::IdBlock>,
    sandboxing: &mut super::sandboxing::Sandboxing,
) -> Option<std::os::fd::BorrowedFd<'t>> {
    let block = block?;
    if task.user_namespace.as_ref().map(|(b, _)| *b) != Some(block) {
        if let Some((_, old)) = &task.user_namespace {
            sandboxing.user_namespace_gone(old.as_fd());
        }
        task.user_namespace = match crate::sys::userns::create(block.first, block.count) {
            Ok(ns) => Some((block, ns)),
            Err(e) => {
                log::warn!(
                    "{}: cannot make the task's user namespace now: {e}",
                    task.name
                );
                None
            }
        };
    }
    task.user_namespace.as_ref().map(|(_, ns)| ns.as_fd())
}

pub(crate) mod blocked;
mod preempting;
pub(crate) use preempting::PreemptionMemory;
mod waiting;

#[cfg(test)]
mod tests;
