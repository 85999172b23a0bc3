#!/bin/sh
# Build bridge's release: static binaries for Linux, macOS and Windows on
# amd64 and arm64, one archive each, and SHA256SUMS. docs/INSTALL.md says
# how users verify them.
#
#   release/build.sh [--version vX.Y.Z] [--out DIR] [--snapshot] [--target OS/ARCH]...
#
# --version   the version to stamp (default: the tag at HEAD; else a Go-style
#             pseudo-version v0.0.0-YYYYMMDDHHMMSS-COMMIT12 from the commit).
# --out       where the archives and SHA256SUMS go (default dist/); it must be
#             empty or missing, so SHA256SUMS covers this build only.
# --snapshot  one target (this machine's, or --target), from a tree that may
#             have uncommitted changes (its version then ends in -dirty).
#             What CI runs, so the release build cannot rot.
# --target    build only OS/ARCH (repeatable).
#
# Every binary is built with CGO_ENABLED=0 (static, no libc), -trimpath (no
# build paths) and the version, commit and commit time set at link time, so
# building the same commit with the same Go gives the same bytes. The binary
# that runs on this machine is run afterwards: `bridge version --json` must
# name the version and commit that were stamped.
set -eu

all_targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"

die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'build.sh: %s\n' "$*" >&2; }

version=""; out=""; snapshot=0; targets=""
while [ $# -gt 0 ]; do
  case $1 in
    --version) [ $# -ge 2 ] || die "--version needs a value"; version=$2; shift ;;
    --version=*) version=${1#--version=} ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --target) [ $# -ge 2 ] || die "--target needs a value"; targets="$targets $2"; shift ;;
    --target=*) targets="$targets ${1#--target=}" ;;
    --snapshot) snapshot=1 ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) printf 'build.sh: error: unknown argument %s (see --help)\n' "$1" >&2; exit 64 ;;
  esac
  shift
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -n "$out" ] || out=$root/dist
case $out in /*) ;; *) out=$(pwd)/$out ;; esac

command -v go >/dev/null 2>&1 || die "go is not on PATH"
command -v git >/dev/null 2>&1 || die "git is not on PATH: the build names the commit it was made from"
# A checkout owned by another user (a CI volume) is still ours to read.
git() { command git -c safe.directory="$root" "$@"; }
commit=$(git rev-parse --verify HEAD 2>/dev/null) || die "$root is not a git checkout with a commit"
# The commit's own time: the same commit always gets the same date.
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
stamp=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M.%S HEAD) # touch -t
dirty=""
[ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=1

if [ -z "$version" ]; then
  version=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true)
  if [ -z "$version" ]; then
    version=v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)-$(printf %.12s "$commit")
  fi
fi
case $version in
  v[0-9]*) ;;
  *) die "version $version does not look like vX.Y.Z" ;;
esac
if [ -n "$dirty" ]; then
  [ "$snapshot" = 1 ] || die "the tree has uncommitted changes: a release names the commit it was built from (commit them, or use --snapshot)"
  version=$version-dirty
fi

host_target=$(go env GOOS)/$(go env GOARCH)
if [ -z "$targets" ]; then
  if [ "$snapshot" = 1 ]; then targets=$host_target; else targets=$all_targets; fi
fi
for t in $targets; do
  case " $all_targets " in *" $t "*) ;; *) die "unknown target $t (one of: $all_targets)" ;; esac
done

if [ -d "$out" ] && [ -n "$(ls -A "$out")" ]; then
  die "$out is not empty: remove it, or pass --out with a new directory"
fi
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/bridge-release.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

if tar --version 2>/dev/null | grep -q 'GNU tar'; then
  gnutar=1
else
  gnutar=""
fi
if command -v sha256sum >/dev/null 2>&1; then
  sha() { sha256sum "$@"; }
elif command -v shasum >/dev/null 2>&1; then
  sha() { shasum -a 256 "$@"; }
else
  die "neither sha256sum nor shasum is on PATH"
fi

ldflags="-s -w -X main.buildVersion=$version -X main.buildCommit=$commit -X main.buildDate=$date"
note "version $version, commit $commit, date $date, $(go env GOVERSION)"
archives=""
native=""
for t in $targets; do
  os=${t%/*}; arch=${t#*/}
  name=bridge_${version#v}_${os}_${arch}
  exe=bridge; [ "$os" = windows ] && exe=bridge.exe
  dir=$work/$name
  mkdir -p "$dir"
  note "building $t"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS= go build -trimpath -buildvcs=false -ldflags "$ldflags" \
    -o "$dir/$exe" ./cmd/bridge
  cp LICENSE README.md "$dir/"
  [ "$t" = "$host_target" ] && native=$dir/$exe
  # Same modes and mtimes on every machine, so the archives depend on the
  # commit and the Go version only.
  chmod 755 "$dir" "$dir/$exe"
  chmod 644 "$dir/LICENSE" "$dir/README.md"
  (cd "$work" && find "$name" -exec env TZ=UTC touch -t "$stamp" {} +)
  if [ "$os" = windows ] && command -v zip >/dev/null 2>&1; then
    archive=$name.zip
    (cd "$work" && find "$name" | LC_ALL=C sort | TZ=UTC zip -q -X "$out/$archive" -@)
  else
    archive=$name.tar.gz
    if [ -n "$gnutar" ]; then
      (cd "$work" && tar --sort=name --owner=0 --group=0 --numeric-owner --format=ustar -cf - "$name") | gzip -n -9 >"$out/$archive"
    else
      (cd "$work" && tar -cf - "$name") | gzip -n -9 >"$out/$archive"
    fi
  fi
  archives="$archives $archive"
done

(cd "$out" && sha $archives >SHA256SUMS)
note "wrote $out:"
(cd "$out" && ls -l $archives SHA256SUMS) >&2

# The binary for this machine must say what it is.
if [ -n "$native" ]; then
  got=$("$native" --json version) || die "$native version failed"
  printf '%s\n' "$got" | grep -q "\"commit\": \"$commit\"" || die "$native version does not name commit $commit: $got"
  printf '%s\n' "$got" | grep -q "\"version\": \"$version\"" || die "$native version does not name version $version: $got"
  note "checked: $("$native" --version), commit $commit"
fi
