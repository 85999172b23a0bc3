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
// Timeout + 2 Grace until the leader dies, plus up to 2 Grace (and the time
// SIGKILL takes) for the rest.
//
// # Containment
//
// A process group does not hold a program that calls setsid, or forks twice
// into a new session: a kill of the group misses it. On Linux one of two
// mechanisms holds every process of a run, chosen at the first run for the
// whole process; [Containment] says which (and `bridge doctor` prints it):
//
//   - cgroup v2: where the daemon's own cgroup is writable (a systemd unit
//     with Delegate=yes, a container's root), each run gets a child cgroup
//     bridge-op-<daemon pid>-<n>, the program is born in it (clone3 with
//     CLONE_INTO_CGROUP: no fork escapes before a move), and the end of the
//     run writes cgroup.kill (before Linux 5.14: SIGKILL to every pid of
//     cgroup.procs until it is empty), then removes the cgroup. Membership is
//     inherited whatever the session, group or parent. The ladder's SIGINT
//     and SIGTERM reach every process of the cgroup outside the group too.
//     An op may make cgroups inside its own; they are removed with it, the
//     deepest first. A cgroup does not hold a process that moves itself out,
//     and an op's process can always move into the daemon's cgroup (it runs
//     as the daemon's user, who can write that cgroup.procs). A new cgroup
//     namespace would stop that only where cgroup2 is mounted with
//     nsdelegate, only a daemon with CAP_SYS_ADMIN could make one, and its
//     ops could leave it (setns); so the runner relies on the process tree
//     instead: the daemon is a child subreaper here too, every process of
//     every op stays in its subtree, and at the end of each run the runner
//     sweeps that subtree, in rounds until none is left: a process of an op
//     that is neither the leader of a run in progress nor in the cgroup of
//     one (or below it) gets SIGKILL, and those that died as the daemon's
//     children are reaped. An op's process that moved into another running
//     op's cgroup dies with that op. A daemon killed outright leaves its
//     runs' cgroups; the next one in the same cgroup kills what is left in
//     them and removes them, at its first run (what had left them went to
//     init with the daemon's death).
//   - process tree tracking, otherwise: the daemon makes itself a child
//     subreaper (PR_SET_CHILD_SUBREAPER), so an orphan of a run is
//     re-parented to the daemon instead of init and every process of every
//     run stays in the daemon's subtree. While runs are in progress the
//     runner walks /proc every 200 ms and ties each process of that subtree
//     to its run: by descent from the leader, or, for an orphan, by having
//     been seen in the run before, by a process group or session of the
//     run, or by holding the run's output pipe. An orphan that nothing ties
//     to a single run is counted in every run in progress, so it dies with
//     the first of them to end. The end of a run sends SIGKILL to every
//     process of it, again until none is left (a fork that raced a round is
//     caught by the next), and reaps the orphans. Processes outside the
//     daemon's subtree are never signalled. A daemon killed outright gives
//     its runs' orphans to init.
//
// Both mechanisms tell the daemon's own children (and their subtrees: left
// alone) from the processes of ops by the session: each op's leader starts
// a session of its own (setsid), and a process can only make a new session,
// never join one, nor join a process group of another session (setpgid). So
// no process of an op can pass for one of the daemon's, or join another
// op's group, the daemon's or another op's. A child that the daemon starts
// itself outside [Run] and that leaves the daemon's session (a helper that
// daemonizes) is taken for a process of an op and killed.
//
// A program that wants to outlive its op has no way to ask: an op never
// leaves a process behind once its outcome is returned. (Neither mechanism
// holds a program started on the op's behalf by another service, such as
// systemd-run or at.)
//
// On Linux the leader is started with Pdeathsig SIGKILL, so it dies with a
// daemon that is killed outright. Pdeathsig fires when the forking *thread*
// exits, and Go exits threads (a goroutine that ends while locked to its
// thread takes it along), so the fork happens on a goroutine locked to its OS
// thread that stays locked until the leader exits: one OS thread per running
// program. Only the leader gets the signal; its descendants need a live
// daemon's group kill. The leader is learned to have exited with
// waitid(WNOWAIT) and reaped only after the last signal to the group, so its
// pid, the group id, cannot be reused while the runner still signals the
// group. The wait for the group to empty comes after the reap: kill(-pgid, 0)
// then answers ESRCH at once in the common case, and /proc is read only when
// a straggler is left (it may be a zombie that init is slow to reap).
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
//   - File descriptors: the child gets 0, 1 and 2 only; every descriptor of
//     the daemon is close-on-exec.
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
