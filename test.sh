#!/usr/bin/env bash
# The project's test command (README "Tests"); .ci/run runs exactly this.
# It checks formatting, vets, runs staticcheck and the race-enabled tests, then
# the cost budget, the CLI scripts, the batch of 10,000, the lifecycle model
# and the sync simulator over many seeds without the race detector, and
# every fuzz target for a bounded number of inputs (FUZZTIME,
# default 100000x each).
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }

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
#   coverage, 50 s of CPU under the race detector);
# - the cost budget (its counts are the same either way, and only there are
#   its allocations checked too);
# - the CLI scripts: every command in them is a new process of the test
#   binary, and under the race detector they took 3.4 times the CPU (225 s
#   against 66 s, each alone here; 120 s against 35 s of wall clock).
#   The daemon's and the agent's code they run is under the race detector
#   here in those packages' own tests, in process and as daemon processes,
#   and the CLI's own goroutines (the batch reader, stdin's look, signals)
#   in cmd/bridge's tests that call it in process.
# The batch test sends 1,500 requests under the race detector, and its
# 10,000 below. Three packages at a time: bridge/host and bridge/runner
# each take about four minutes, and cmd/bridge-bench's minute and a half is
# mostly waiting, so two lanes left the CPUs idle for minutes.
go test -race -count=1 -p 3 -timeout 20m \
  -skip '^TestSimProperties$|^TestSimReplicatorDeterministic$|^TestCostBudget$|^TestScripts$' ./...

step "cost budget, without the race detector"
# Alone: among what it counts are an idle daemon's wake-ups, which a busy
# machine would add to.
go test -count=1 -timeout 10m -run '^TestCostBudget$' ./cmd/bridge/

step "side by side: the CLI scripts and the batch of 10,000; the lifecycle model (${MODEL_SEEDS:-60} seeds)"
# Two runs at once, each printed when both ended: both mostly wait on
# daemons and processes. The model checks that every row of DESIGN.md §6
# was taken (from 20 seeds); its daemons mostly wait, 8 seeds at a time.
logs=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT
go test -count=1 -timeout 10m -run '^TestScripts$|^TestSubmitBatchTenThousand$' ./cmd/bridge/ >"$logs/cli" 2>&1 &
cli=$!
go test -count=1 -timeout 20m -parallel 8 -run '^TestLifecycleModel$' ./bridge/host/ -model.n="${MODEL_SEEDS:-60}" >"$logs/model" 2>&1 &
model=$!
failed=""
wait "$cli" || failed="$failed cmd/bridge"
wait "$model" || failed="$failed bridge/host"
cat "$logs/cli" "$logs/model"
if [ -n "$failed" ]; then
  echo "failed:$failed"; exit 1
fi

step "sync simulator (${SIM_SEEDS:-60} seeds) and its replicator, the redaction's tests over 20,000 texts each"
# Alone: the simulator's seeds take both CPUs (two at a time). The two
# redaction tests run 600 and 2,000 of their 20,000 texts under the race
# detector above (regexp is ten times slower there); here all of them.
go test -count=1 -timeout 20m \
  -run '^TestSimProperties$|^TestSimReplicatorDeterministic$|^TestRedactPerLineFindsWhatTheWholeTextDoes$|^TestRedactNeedlesNeverSkipAMatch$' \
  ./bridge/host/ -sim.n="${SIM_SEEDS:-60}"

# Budgets are counts, not durations: with a duration, Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" when
# the deadline races a busy worker (golang/go#75804, fixed in Go 1.27). A count
# has no deadline to race. Minimizing a new input is bounded by a count too.
step "fuzz (${FUZZTIME:-100000x} per target)"
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "-- $pkg $target"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-100000x}" \
      -fuzzminimizetime="${FUZZMINIMIZETIME:-10000x}" "$pkg" >/tmp/bridge-fuzz.log 2>&1 || {
      cat /tmp/bridge-fuzz.log; echo "fuzz target $target failed"; exit 1; }
  done
done
echo "all checks passed"
