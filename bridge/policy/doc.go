// Package policy reads the host's policy file and turns an agent's request
// (agent, op, string arguments) into a fully validated command.
//
// Entry points:
//
//   - [Load] / [Parse] read a strict TOML policy into a [*Policy]; every error
//     is a [*PolicyError] naming file, line, key and a hint.
//   - [Policy.Render] checks that the agent may run the op, validates each
//     argument against its type and renders the argv templates into an
//     [*Invocation] for the runner. [Policy.Allowed] is the permission check
//     alone.
//   - [Policy.Catalog] is the public description of the ops an agent may see
//     ([Policy.AgentCatalog] for one agent); [OpInfo.CheckArgs] checks a
//     call against it before it is sent; [Policy.Warnings] lists what a
//     policy may understate;
//     [Policy.AgentOps] and [Policy.Agents] list permissions;
//     [Policy.Explain] and [Invocation.String] print for the operator.
//
// Request errors wrap [ErrNotAllowed], [ErrUnknownOp] or [ErrInvalidArg] (the
// last as an [*ArgError]); any other Render error is the host's problem (a
// program missing from PATH, a path root that does not exist).
//
// # Schema
//
// The reference for policy authors is docs/POLICY.md: every key, what is
// refused at load and why, and complete examples (TestDocsPolicyKeys and
// TestDocsPolicyExamples keep it in step with this package). A complete,
// commented example is testdata/example.toml. In short, the top level:
//
//	version = 1                     optional; no other version exists
//	[defaults]                      optional; applies to ops that do not set the key
//	  timeout, max_output,          as for ops
//	  max_stdin, env
//	  approve_writes                bool, default false: every op of scope "write"
//	                                waits for `bridge approve` unless it sets approve
//	[ops.NAME]                      NAME: [a-z0-9][a-z0-9._-]{0,63}
//	[ops.NAME.args.ARG]             ARG: [a-z][a-z0-9_]{0,31}, not request_id, agent, op
//	[agents.NAME]                   NAME as for ops
//	[redact]                        optional; output redaction (see below)
//
// Op keys:
//
//	argv         array of strings, required, non-empty. argv[0] is an absolute
//	             path or a bare name resolved in PATH at Render time (set_env's
//	             PATH if it sets one, else the daemon's PATH; relative PATH
//	             entries are skipped); never a template. Other elements are
//	             templates: {ARG} is replaced by the validated value, also
//	             inside text ("--run={run}"); {request_id}, {agent} and {op}
//	             are reserved variables; {{ and }} are literal braces; any other
//	             brace, or a reference to an undeclared argument, is a load
//	             error. An element naming an optional argument that the request
//	             omitted (no default) is dropped whole. Such an element may not
//	             follow one that starts with "-" (other than "--" and forms
//	             holding their value, "--name=value") unless it is the last
//	             element: dropped, it would let the next value slide into the
//	             option's slot (["curl", "-o",
//	             "{out}", "{url}"] would run "curl -o URL"). Write the option
//	             and its value as one element ("-o{out}", "--output={out}"),
//	             give the argument a default, or make it required; the load
//	             error says so.
//	dir          working directory; "~" and "~/..." expand to the daemon's home
//	             at load time; must be absolute; default "~".
//	timeout      Go duration string, > 0, at most 24h; default 10m.
//	max_output   size: "1000000", "512KiB", "4MiB", "1GiB", "10MB", "10KB" or an
//	             integer; > 0, at most 256MiB; default 4MiB.
//	max_stdin    size as for max_output: the most standard input a request
//	             may carry; 0 means none; at most 4GiB; default 1MiB. The
//	             host refuses a larger request (reason too-large) before it
//	             copies its input, and the catalog shows the bound.
//	stdin        "none", "optional" or "required": whether the op reads
//	             standard input. Default: "optional", or "none" when
//	             max_stdin is 0. "none" sets max_stdin to 0 (an explicit
//	             max_stdin > 0 with it is an error); "optional" and
//	             "required" need max_stdin > 0. A required input that is
//	             missing is refused (bad-argument), by the agent before it
//	             sends and by the host. The catalog carries stdin only when
//	             the policy sets it.
//	stdin_hint   string: what the input is ("unified diff"), shown to agents;
//	             not with stdin = "none".
//	env          array of variable names passed from the daemon's environment
//	             (only those set there). Replaces defaults.env. Default: none.
//	set_env      table NAME = "value" fixed by the policy author. A name may
//	             not be in both env and set_env.
//	idempotent   bool, default false: safe to re-run after a crash.
//	approve      bool, default false: each run waits for `bridge approve`.
//	concurrency  int 0..65536, default 1; 0 means unlimited.
//	description  string shown to agents.
//	scope        "read", "write" or "execute"; default "write". What the op
//	             does to the host, for agents and humans: "execute" runs
//	             code the op does not fix itself (a tree's tests, builds,
//	             scripts). Policy.Warnings (`bridge policy check`) warns
//	             about a "read" op whose program runs code from its tree.
//	             approve_writes applies to "write" only.
//	risk         string: a free note on what the op really does, for agents.
//	dry_run      the name of another op that checks what this one would do
//	             without doing it (`git apply --check` for `git apply`).
//	undo         the name of another op that takes this one back (a
//	             restore). dry_run and undo are shown by `policy explain`
//	             and, when the agent may run them, in its catalog.
//	reconcile    optional argv with the same rules, for `bridge reconcile`.
//	args         the argument tables below. Every argument must be used in
//	             argv or reconcile.
//	cpu          CPU-time limit: whole seconds (60 or "60") or a Go duration ("1m"),
//	             at most 24h (RLIMIT_CPU; SIGXCPU, then SIGKILL a second later).
//	memory       address-space limit, a size as for max_output, at least 1MiB
//	             (RLIMIT_AS).
//	open_files   8..1048576 (RLIMIT_NOFILE).
//	processes    1..1048576 (RLIMIT_NPROC, which counts every process of the
//	             daemon's user, not only the op's).
//
// Agent keys:
//
//	ops                      array of op names, required; "*" is refused.
//	max_concurrent           runs of this agent at once (1..1048576).
//	max_runs_per_hour        runs started in any sliding hour.
//	max_cpu_seconds_per_day  CPU seconds of its ops per UTC day.
//
// A request over a ceiling is rejected (it is not queued). Absent: no ceiling.
//
// The [redact] table: enabled (bool, default true) turns the host's secret
// redaction of op output on or off; patterns (array of Go RE2 strings, at
// most 64, none matching the empty string) adds the host's own secrets to the
// built-in patterns.
//
// Environment names must match [A-Z_][A-Z0-9_]* and may not be LD_*, DYLD_*,
// BASH_FUNC_*, BASH_ENV, ENV, PROMPT_COMMAND, SHELLOPTS, BASHOPTS, PS4, IFS,
// CDPATH or GLOBIGNORE (each makes a shell or the loader run code named by
// the value). The child's environment is exactly the env names found plus
// set_env, sorted.
//
// Argument keys:
//
//	type         string | int | bool | enum | path (required)
//	description  string shown to agents
//	required     bool; default true unless default is given; required = true
//	             with a default is an error
//	default      a value of the argument's own TOML type (integer for int,
//	             boolean for bool, string otherwise) that passes its own checks
//	string:      pattern (Go RE2, anchored as ^(?:pattern)$), max_len (bytes,
//	             1..4096, default 256), allow_dash, allow_at, allow_plus
//	             (bools, default false: see the leading-character rule)
//	int:         min (default 0), max (default none)
//	enum:        values (non-empty array of distinct printable strings)
//	path:        root (absolute or ~, required), must_exist (bool)
//
// A key that belongs to another type (pattern on an int, ...) is an error.
//
// Values arrive as strings and are checked at Render:
//
//   - string: valid UTF-8; no NUL, line break, other control character or
//     bidirectional control; at most max_len bytes; full match of pattern;
//     and the leading-character rule: no leading "-" (an option) unless
//     allow_dash, "@" (a file of more arguments to gcc, javac, ld, ...)
//     unless allow_at, "+" (a forced ref to git push, an option to some
//     tools) unless allow_plus.
//   - int: canonical decimal -?(0|[1-9][0-9]*) ("-0", "+1", "007", "1e3",
//     " 1" refused), fits int64, within min..max.
//   - bool: exactly "true" or "false".
//   - enum: exactly one of values (case-sensitive).
//   - path: same text rules; relative values are joined to root, absolute
//     ones must already be under it; after cleaning the path must stay under
//     root, and walking it on disk from the real root, every symlink met must
//     resolve inside the real root (a dangling symlink is refused). The value
//     rendered is the resolved absolute path. must_exist requires it to exist.
//
// # Security
//
// The policy is the security boundary between the synced folder and the host.
// It must live outside the folder; [Load] refuses a file that is not regular,
// is larger than 1 MiB or, on Unix, that group or others may write, or that
// sits in a directory they may write (the error names the chmod). The request supplies only
// argument values: never the program, the working directory, the environment,
// the timeout or the limits. No shell is involved anywhere: a value is placed
// inside exactly one argv element, so $(...), backticks, ; and spaces are
// plain bytes. Options smuggled as values ("--upload-pack=...", "@args",
// "+main") are refused by the leading-character rule, int minimums default to
// 0 for the same reason, and an omitted optional argument can never move
// another value into an option's slot (see argv).
// Agents list ops explicitly, so adding an op never widens an existing agent.
// Path confinement checks the filesystem as it is at Render time; a process
// that can change the tree under root between the check and the op's use can
// still race it, so roots should not be writable by anyone less trusted than
// the op. Catalog leaves out argv, dir, env and path roots.
//
// # Compatibility
//
// The schema is version 1. New keys will be optional; a policy valid today
// stays valid and means the same.
package policy
