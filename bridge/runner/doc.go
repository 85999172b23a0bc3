// Package runner runs one already-validated, already-rendered invocation as a
// real process and reports what became of it (design invariant 8: no shell,
// no inherited secrets).
//
// The entry points:
//
//   - [Run] runs a [Spec] (argv, working directory, complete environment,
//     stdin, timeout, output cap, [Limits], grace period) to the end and returns
//     an [Outcome]: exit code or terminating signal, timed out or cancelled,
//     captured stdout and stderr, CPU time. It never returns an error of its
//     own; a program that could not start has [Outcome.StartErr].
//   - [Main] must be the first statement of main() in the bridge binary (and
//     of TestMain in tests that run with Limits): it is the resource-limit shim.
//   - [Containment] says what holds every process of a run on this system.
//   - [OpenState] opens a daemon's runner records and ends what runs of an
//     earlier daemon left; [State.Run] is Run for a run recorded there.
//
// # Execution
//
// Argv[0] is executed directly with execve; nothing is interpreted. A name
// without a slash is looked up in the PATH of Spec.Env, skipping relative
// entries; without a PATH there, it must be absolute. The child's environment
// is exactly Spec.Env, its working directory Spec.Dir (absolute, must exist),
// its stdin Spec.Stdin or /dev/null. It leads a process group of its own, so
// that the runner can signal the whole tree it spawns, and on Linux it is
// also held by a containment that a process leaving the group cannot leave
// (see Containment). On Linux it leads a session of its own too, without a
// controlling terminal.
//
// # The signal ladder
//
// When Spec.Timeout expires or ctx is done, the process group, and every
// other process of the run's containment, receives SIGINT, then SIGTERM after
// Spec.Grace, then SIGKILL after another Grace (the GitHub Actions runner's
// ladder; Grace defaults to 5 s). SIGINT first lets tools
// clean up as they would at a terminal. The first cause is recorded as
// TimedOut or Cancelled; Signal names the signal that ended the program, if
// one did.
//
// When the program (the group leader) exits, on its own or not, the runner
// waits up to Grace for its output pipes to close, then sends SIGKILL to the
// group and the containment in any case and waits for them to die:
// background children ("sleep 1000 &"), and on Linux also those that called
// setsid or double-forked, never outlive the run, and a child that keeps
// stdout open cannot hang Run. Without a containment a process that left the
// group is out of reach; if it still holds a pipe after another Grace, the
// runner stops reading and says so in Outcome.Notes. So Run lasts at most
// Timeout + 2 Grace until the leader dies, plus up to 2 Grace and the time
// SIGKILL takes for the rest: a keeper's killed are given up to 30 s to
// die (a keeper that does not answer, 5 s more), a cgroup's the grace,
// after which Run returns with a note.
//
// # Containment
//
// A process group does not hold a program that calls setsid, or forks twice
// into a new session: a kill of the group misses it. On Linux one of two
// mechanisms holds every process of a run from its start until they are
// all gone, also across a daemon killed outright; it is chosen at the first
// run for the whole process, and [Containment] says which (`bridge doctor`
// prints it):
//
//   - cgroup v2, where the daemon's own cgroup is writable (root, or a
//     systemd unit with Delegate=yes): each run gets a child cgroup, the
//     program is born in it (clone3 with CLONE_INTO_CGROUP: no fork escapes
//     before a move), and membership is inherited whatever the session,
//     group or parent. The ladder's signals reach every process of it. The
//     end of the run writes cgroup.kill (before Linux 5.14: SIGKILL to each
//     pid of cgroup.procs) and waits for cgroup.events to say "populated 0"
//     (watched with poll(2), not polled: a run that left nothing costs one
//     read); the run's CPU is its cgroup's cpu.stat; then the cgroup is
//     removed with any the op made inside it, the deepest first.
//   - a keeper process per run, otherwise: this binary started again as
//     the run's keeper (keeper_linux.go), a child subreaper that starts the
//     program, so every process of the run stays in the keeper's subtree
//     (an orphan is re-parented to the keeper, not to init). The keeper
//     signals the run by walking its own subtree (/proc/PID/task/*/children,
//     never the machine's process list), ends it in rounds until it has no
//     child left (wait4: ECHILD, exact), reaps every process, and reports the
//     run's CPU from its RUSAGE_CHILDREN. A keeper whose run ended cleanly
//     serves the next one (a few wait idle), so a run costs no process
//     start once one waits (a start is a few milliseconds of CPU).
//
// The daemon is a child subreaper in both, and each op's leader (and each
// keeper) starts a session of its own, so the daemon's own children are
// those in its session, which no process of an op can join. An op's
// process that moves itself out of its run's cgroup (its user can write the
// daemon's cgroup.procs), or whose keeper is killed (by the op itself),
// stays in the daemon's subtree: the end of each run in a cgroup, and the
// end of a run whose keeper died, sweep the daemon's children and kill
// every process of an op there that no run in progress holds.
//
// # Across a crash
//
// A daemon runs its ops through a [State], a private directory (never the
// synced folder). In the cgroup mode a guard process (this binary again,
// keeper_linux.go) ends every cgroup of the daemon's runs as soon as the
// daemon dies; a keeper ends its own run. [OpenState], at the next start,
// ends what is left, before that daemon answers anything: it removes the
// cgroups of this directory's runs (bridge-run-<tag>-*, under each parent
// cgroup recorded in the directory's file "cgroups"), killing what is left
// in them and waiting for them to empty; and it waits for the keepers of
// the earlier daemon (and its guard), which end their runs when their
// control socket closes, to exit: each holds a copy of the daemon's open file description
// of "keepers.lock", whose shared lock the new daemon must see released
// before it may take it exclusively. What it cannot end in time it reports
// ([Leftovers].Unended), and the daemon then answers such a run
// "uncertain" without running it again or asking its reconcile command.
// The tag is the directory's id (file "id"), bound to the directory's
// device and inode ("id.dev"): a copy of the directory, or one whose inode
// changed, takes a new id, and the cgroups of the old one, which may be
// another daemon's, are never ended but reported as Unended while they
// hold a process.
// These records are not flushed to disk: processes do not outlive a
// reboot, and what the kernel holds of a file survives any crash of the
// daemon.
//
// A program that wants to outlive its op has no way to ask: an op never
// leaves a process behind once its outcome is returned. Neither mechanism
// holds a program started on the op's behalf by another service (such as
// systemd-run or at); a process that moves itself out of its cgroup, or
// kills its own keeper, is held only while the daemon lives.
//
// On Linux the leader is started with Pdeathsig SIGKILL, so it dies with
// its parent, the daemon or its keeper, killed outright. Pdeathsig fires
// when the forking *thread* exits, and Go exits threads (a goroutine that
// ends while locked to its thread takes it along), so the fork happens on a
// goroutine locked to its OS thread that stays locked until the leader
// exits: one OS thread per running program. Only the leader gets the
// signal; the rest of the run is ended by its cgroup or its keeper. The
// leader is learned to have exited with waitid(WNOWAIT) and reaped only
// after the last signal to the group, so its pid, the group id, cannot be
// reused while the runner still signals the group. Where a containment
// holds the run, its end covers the group; with the group alone, the wait
// for it to empty comes after the reap.
//
// # Output
//
// Stdout and stderr are captured separately, each within Spec.MaxOutput
// (default 1 MiB): the first half of the cap and the last half are kept, the
// middle dropped and replaced by the line "\n[... N bytes omitted by bridge
// ...]\n"; Output.Total counts every byte and Output.Truncated is set. The
// pipes are read to the end whatever the cap, so the child never blocks on a
// full pipe. Spec.OnOutput sees every byte as it arrives, for live progress.
//
// # Resource limits and the shim
//
// Go's os/exec has no hook between fork and exec, and both alternatives are
// wrong: setrlimit in the daemon limits the daemon itself and every other
// child, and prlimit after the start leaves a window in which the program runs
// unlimited. So when any of Spec.Limits is set, the runner starts its own
// executable (/proc/self/exe on Linux, os.Executable on macOS) as
//
//	<self> __bridge_exec__ <cpu>,<as>,<nofile>,<nproc>,<fsize> <path> <argv...>
//
// with the child's exact environment. [Main] sees the marker, sets the limits
// on itself, and execve's the program: same pid, same process group, the
// limits in force from the first instruction, the marker and limit arguments
// gone. It reports through a close-on-exec pipe on fd 3, so a failed setrlimit
// or execve is a StartErr with its errno, and a binary that forgot to call
// Main (and so ran as itself, with the shim's arguments) is a StartErr once it
// exits.
//
// Each limit is set as soft and hard limit, clamped to the daemon's hard
// limit; RLIMIT_CPU gets a hard limit one second above the soft one so the
// program gets SIGXCPU before SIGKILL. RLIMIT_NPROC counts every process and
// thread of the real user, not of this run, and does not bind root. RLIMIT_AS
// is enforced by Linux, not by macOS. Go raises its own soft RLIMIT_NOFILE to
// the hard limit at start-up and lowers it again for the children it starts;
// the shim's execve does not, so under the shim a program whose OpenFiles is
// unset sees a soft limit equal to the hard one. On other systems limits are
// not applied and Outcome.Notes says so.
//
// # Security
//
//   - No shell, ever: argv elements reach the program as they are, so
//     "$(id)", quotes, globs and semicolons are inert data.
//   - The environment is exactly Spec.Env: nothing of the daemon's (keys,
//     tokens, BRIDGE_HOME) leaks, and the program is found through the child's
//     PATH, never the daemon's. Error messages name environment keys, never
//     values. The shim is a Go program that starts with the child's
//     environment, so GODEBUG or GOTRACEBACK in Spec.Env affect its few
//     milliseconds before execve; nothing else of the shim survives execve.
//   - File descriptors: the child gets 0, 1 and 2 only: right before each
//     start every descriptor of the daemon is marked close-on-exec, whatever
//     opened it (syncsafe.CloseOnExec), and the keeper does the same.
//   - The process group, the containment, the ladder, the final kill and
//     Pdeathsig bound the run in time; MaxOutput bounds its memory in the
//     daemon; Limits bound its resources. None of them is a sandbox: the
//     program runs with the daemon's user, file system and network.
//   - Without a containment (not Linux) a program that calls setsid or
//     setpgid escapes the group kill; Run still returns, and Outcome.Notes
//     tells when it noticed.
//
// # Platforms
//
// Linux has all of the above. macOS and the BSDs have process groups and the
// ladder but no containment and no Pdeathsig, and reap the leader at once (a small window for pid
// reuse before the final group kill); the shim exists on macOS only. Windows
// has no process groups or signals: the program alone is killed at once on
// timeout or cancel, its descendants are not reached, limits are not applied,
// and Outcome.Notes says so.
package runner
