#!/usr/bin/env bash
# The project's test command (README "Tests"); .ci/run runs exactly this.
# It checks formatting, vets, runs staticcheck and the race-enabled tests, then
# without the race detector the cost budget, the CLI scripts, the batch of
# 10,000, the lifecycle model over many seeds, the bounds the race detector's
# memory would break, the sync simulator over many seeds with the redaction's tests at
# full size, and every fuzz target for a bounded number of inputs (FUZZTIME,
# default 100000x each).
set -euo pipefail
cd "$(dirname "$0")"

# Each step names the time it starts at and the CPU this script's commands
# used before it (the shell's waited-for children in /proc: user + system),
# so a log says where the minutes and the CPU went (docs/TESTING.md, "How
# long it takes here").
step() {
  local cpu
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.0f s", ($14 + $15) / hz }' "/proc/$$/stat" 2>/dev/null || echo "?")
  printf '\n== %s (%s, CPU before it %s)\n' "$*" "$(date -u +%T)" "$cpu"
}

step gofmt
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step staticcheck
sc=$(go env GOPATH)/bin/staticcheck
if ! [ -x "$sc" ] || ! "$sc" -version 2>/dev/null | grep -q '(0.8.2)'; then
  GOFLAGS= go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
"$sc" ./...

step "go test -race"
# Left out here, run once below without the race detector:
# - the sync simulator's property test, with enough seeds for 10,000+
#   simulated requests (its regression seeds still run here), and its
#   replicator's self-test (the simulator's own determinism and fault
#   coverage: 50 s under the race detector beside the rest);
# - the cost budget (its counts are the same either way, and only there are
#   its allocations checked too);
# - the CLI scripts: every command in them is a new process of the test
#   binary, and under the race detector they took 3.4 times the CPU (225 s
#   against 66 s, each alone here; 120 s against 35 s of wall clock).
#   What they drive stays under the race detector here: the daemon in
#   bridge/host (in process and as daemon processes), the agent, waiting for
#   many answers at once included, in bridge/agent, the CLI's batch reader,
#   first signal and demo in cmd/bridge's tests that call it in process, and
#   `bridge serve` and `bridge mcp` as race-built processes in
#   TestReadmeQuickStart and TestMCP (a race report of `bridge mcp` fails
#   TestMCP).
# The batch test sends 1,500 requests under the race detector, and its
# 10,000 below. Two packages at a time, go test's default on 2 cores, and
# beside them cmd/bridge-bench's, which mostly waits (its quick run of the
# harness: 18 s of CPU in 90 s): after the others it was the step's last
# minute and a half. Three packages at a time (-p 3) took as long as two
# (341 s against 349 s): the step is bound by the CPUs.
# The bench's test binary is built first, so that the two runs do not both
# compile the packages they share.
bench=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$bench"' EXIT
go test -race -c -o "$bench/bench.test" ./cmd/bridge-bench/
(cd cmd/bridge-bench && exec "$bench/bench.test" -test.count=1 -test.timeout=20m -test.paniconexit0) >"$bench/log" 2>&1 &
bench_pid=$!
# The longest packages are named first, so that they start early: in go
# list's order the runner's tests started after nine smaller packages and the
# step ended with them, the host's half a minute before (275 s against 242 s,
# each step alone here). The host's system suites (bridge/host/systest) are
# the third.
long=$(go list ./bridge/host ./bridge/host/systest ./bridge/runner)
go test -race -count=1 -timeout 20m \
  -skip '^TestSimProperties$|^TestSimReplicatorDeterministic$|^TestCostBudget$|^TestScripts$' \
  $long $(go list ./... | grep -v -x -F "$long" | grep -v '/cmd/bridge-bench$')
if wait "$bench_pid"; then
  echo "ok  	cmd/bridge-bench (beside the others)"
else
  cat "$bench/log"; echo "FAIL	cmd/bridge-bench"; exit 1
fi

step "cost budget, the CLI scripts and the batch of 10,000, without the race detector"
# The budget runs first and alone (the batch test waits for it, being
# parallel): among what it counts are an idle daemon's wake-ups, which a
# busy machine would add to.
go test -count=1 -timeout 10m -run '^TestCostBudget$|^TestScripts$|^TestSubmitBatchTenThousand$' ./cmd/bridge/

step "lifecycle model (${MODEL_SEEDS:-60} seeds)"
# Random sequences of everything that happens to requests, against real
# daemon processes; over this many seeds every row of DESIGN.md §6 is taken
# (the test checks it from 20). The daemons mostly wait: 8 seeds at a time.
# (Run at the same time as the CLI scripts and the batch, the two took 125 s,
# against 65 s and 49 s one after the other: the steps after the race step
# are bound by the CPUs too.)
go test -count=1 -timeout 20m -parallel 8 -run '^TestLifecycleModel$' ./bridge/host/systest/ -model.n="${MODEL_SEEDS:-60}"

step "the bounds the race detector's memory would break, without it"
# Under the race detector its shadow memory lifts the daemon's and the
# agent's peak RSS bound for 48 MiB of output and the shim's address-space
# limit, so those are checked here.
go test -count=1 -timeout 10m -run '^TestOutputMemoryBounded$|^TestLimitsReachChild$|^TestAddressSpaceLimitBelowTheShims$' ./bridge/host/ ./bridge/runner/

step "sync simulator (${SIM_SEEDS:-60} seeds) and its replicator, the redaction's tests at full size"
# Alone: the simulator's seeds take both CPUs (two at a time). The three
# redaction tests run 600 and 2,000 of their 20,000 texts and 32,768 of
# their 262,144 lines under the race detector above (regexp is ten times
# slower there); here all of them.
go test -count=1 -timeout 20m -run '^TestSimProperties$|^TestSimReplicatorDeterministic$' \
  ./bridge/host/systest/ -sim.n="${SIM_SEEDS:-60}"
go test -count=1 -timeout 10m \
  -run '^TestRedact(PerLineFindsWhatTheWholeTextDoes|NeedlesNeverSkipAMatch|DenseNeedlesStayCheap)$' ./bridge/host/

# Budgets are counts, not durations: with a duration, Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" when
# the deadline races a busy worker (golang/go#75804, fixed in Go 1.27). A count
# has no deadline to race. Minimizing a new input is bounded by a count too.
step "fuzz (${FUZZTIME:-100000x} per target)"
# The targets are found in each package's test files for this platform (go
# list reads them without building): asking every package's test binary
# (go test -list) built 17 of them without the race detector, 13 only to
# say they have none.
targets=$(go list -f '{{.ImportPath}}{{$d := .Dir}}{{range .TestGoFiles}} {{$d}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$d}}/{{.}}{{end}}' ./... |
  while read -r pkg files; do
    [ -z "$files" ] || { grep -ho '^func Fuzz[A-Za-z0-9_]*(' $files || true; } | sed "s|^func \(.*\)(\$|$pkg \1|"
  done)
if [ "$(wc -l <<<"$targets")" -lt 11 ]; then
  echo "fuzz: found only these targets, where there are 11 or more:"; echo "$targets"; exit 1
fi
while read -r pkg target; do
  echo "-- $pkg $target ($(date -u +%T))"
  go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-100000x}" \
    -fuzzminimizetime="${FUZZMINIMIZETIME:-10000x}" "$pkg" >/tmp/bridge-fuzz.log 2>&1 || {
    cat /tmp/bridge-fuzz.log; echo "fuzz target $target failed"; exit 1; }
done <<<"$targets"
step "all checks passed"
