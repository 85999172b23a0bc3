#!/usr/bin/env bash
# The project's test command (README "Tests"); .ci/run runs exactly this.
# It checks formatting, vets, runs staticcheck and the race-enabled tests, then
# the cost budget and the batch of 10,000 without the race detector, the
# lifecycle model and the sync simulator over many seeds, and every fuzz
# target for a bounded number of inputs (FUZZTIME, default 100000x each).
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
# The sync simulator's property test runs once more below, without the race
# detector, with enough seeds for 10,000+ simulated requests; here it is left
# out to keep the race run short (its regression seeds still run here). So is
# the cost budget, which runs below without the race detector (its counts are
# the same either way, and only there are its allocations checked too). The
# batch test sends 1,500 requests under the race detector, and its 10,000 below.
go test -race -count=1 -timeout 20m -skip '^TestSimProperties$|^TestCostBudget$' ./...

step "cost budget and the batch of 10,000, without the race detector"
go test -count=1 -timeout 10m -run '^TestCostBudget$|^TestSubmitBatchTenThousand$' ./cmd/bridge/

step "lifecycle model (${MODEL_SEEDS:-60} seeds)"
# Random sequences of everything that happens to requests, against real
# daemon processes; over this many seeds every row of DESIGN.md §6 is taken
# (the test checks it from 20). The daemons mostly wait: 8 seeds at a time.
go test -count=1 -timeout 20m -parallel 8 -run '^TestLifecycleModel$' ./bridge/host/ -model.n="${MODEL_SEEDS:-60}"

step "sync simulator (${SIM_SEEDS:-60} seeds), and the redaction's per-line runs over 20,000 texts"
# The redaction test runs a tenth of its texts under the race detector above
# (regexp is ten times slower there); here all of them.
go test -count=1 -timeout 20m -run '^TestSimProperties$|^TestRedactPerLineFindsWhatTheWholeTextDoes$' ./bridge/host/ -sim.n="${SIM_SEEDS:-60}"

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
