#!/usr/bin/env bash
# The project's test command (README "Tests"); .ci/run runs exactly this.
# It checks formatting, vets, runs staticcheck and the race-enabled tests, then
# the cost budget, and the CLI scripts, the batch of 10,000, the lifecycle
# model and the sync simulator over many seeds without the race detector,
# and every fuzz target for a bounded number of inputs (FUZZTIME,
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
#   simulated requests (its regression seeds still run here);
# - the cost budget (its counts are the same either way, and only there are
#   its allocations checked too);
# - the CLI scripts: every command in them is a new process of the test
#   binary, and the race detector's start in each made them 4.6 times slower
#   (145 s against 31 s, the longest part of the race step's second lane).
#   The daemon's and the agent's code they run is under the race detector
#   here in those packages' own tests, in process and as daemon processes,
#   and the CLI's own goroutines (the batch reader, stdin's look, signals)
#   in cmd/bridge's tests that call it in process.
# The batch test sends 1,500 requests under the race detector, and its
# 10,000 below.
go test -race -count=1 -timeout 20m -skip '^TestSimProperties$|^TestCostBudget$|^TestScripts$' ./...

step "cost budget, without the race detector"
# Alone: among what it counts are an idle daemon's wake-ups, which a busy
# machine would add to.
go test -count=1 -timeout 10m -run '^TestCostBudget$' ./cmd/bridge/

step "side by side: the CLI scripts and the batch of 10,000; the lifecycle model (${MODEL_SEEDS:-60} seeds), the sync simulator (${SIM_SEEDS:-60} seeds) and the redaction's per-line runs over 20,000 texts"
# Two runs at once, each printed when both ended: most of either is waiting
# on daemons and processes, so they share the two cores. The model checks
# that every row of DESIGN.md §6 was taken (from 20 seeds); its daemons
# mostly wait, 8 seeds at a time, while the simulator's seeds take the CPUs,
# two at a time. The redaction test runs a tenth of its texts under the race
# detector above (regexp is ten times slower there); here all of them.
logs=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT
go test -count=1 -timeout 10m -run '^TestScripts$|^TestSubmitBatchTenThousand$' ./cmd/bridge/ >"$logs/cli" 2>&1 &
cli=$!
go test -count=1 -timeout 20m -parallel 8 \
  -run '^TestLifecycleModel$|^TestSimProperties$|^TestRedactPerLineFindsWhatTheWholeTextDoes$' ./bridge/host/ \
  -model.n="${MODEL_SEEDS:-60}" -sim.n="${SIM_SEEDS:-60}" >"$logs/host" 2>&1 &
host=$!
failed=""
wait "$cli" || failed="$failed cmd/bridge"
wait "$host" || failed="$failed bridge/host"
cat "$logs/cli" "$logs/host"
if [ -n "$failed" ]; then
  echo "failed:$failed"; exit 1
fi

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
