#!/usr/bin/env bash
# The crates as crates.io would get them (docs/testing.md, "Packaging"): `cargo package`
# of every published crate (tollgate, tollgate-http, tollgate-tower,
# tollgate-server), its verify step included (each .crate built on its own,
# from its own files only); each .crate holds its README and both license
# files; and `cargo install --path crates/tollgate-server` gives a
# `tollgate` that runs: --version and `validate` of the example config.
# scripts/test.sh runs it. The install shares the target directory
# ($CARGO_TARGET_DIR or target/), so a second run rebuilds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
target="${CARGO_TARGET_DIR:-target}"
crates=(tollgate tollgate-http tollgate-tower tollgate-server)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "package-check: no version in Cargo.toml" >&2; exit 1; }

# Interdependent crates not yet on crates.io: one `cargo package` for all,
# which verifies each against the others' packages (a local registry).
# --allow-dirty: a developer's run checks the tree as it is.
# Cargo unpacks each local-registry .crate into
# $CARGO_HOME/registry/src/<hash of the registry's path>/ and, when that
# folder exists, reuses it without comparing contents. The registry's path
# (under target/package) is the same on every run from one checkout, so a
# run after a code change would verify against the last run's sources of an
# unchanged version. Our crates are on no other registry: drop every
# unpacked copy of them.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
args=()
for c in "${crates[@]}"; do
  args+=(-p "$c")
  rm -rf "$cargo_home"/registry/src/*/"$c-$version"
done
cargo package --locked --allow-dirty "${args[@]}"

for c in "${crates[@]}"; do
  file="$target/package/$c-$version.crate"
  listing=$(tar tzf "$file")
  for f in Cargo.toml README.md LICENSE-MIT LICENSE-APACHE; do
    grep -qx "$c-$version/$f" <<<"$listing" || {
      echo "package-check: $file has no $f" >&2
      exit 1
    }
  done
  # a symlinked license must arrive as the file's content
  tar xzOf "$file" "$c-$version/LICENSE-MIT" | cmp -s - LICENSE-MIT || {
    echo "package-check: $file's LICENSE-MIT is not the repository's" >&2
    exit 1
  }
  # the verify build compiled the sources this checkout has, not a stale copy
  for unpacked in "$cargo_home"/registry/src/*/"$c-$version"; do
    [ -d "$unpacked" ] || continue
    diff -rq "$unpacked/src" "crates/$c/src" >/dev/null || {
      echo "package-check: $unpacked/src differs from crates/$c/src: verified stale sources" >&2
      exit 1
    }
  done
  echo "package-check: $c-$version.crate: $(grep -c . <<<"$listing") files, README and licenses in"
done

# The release build is most of this script's time on a clean clone (no
# other step builds release); PACKAGE_CHECK_INSTALL=debug installs the
# debug build instead, for a quick local run.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
profile=()
[ "${PACKAGE_CHECK_INSTALL:-release}" = debug ] && profile=(--debug)
cargo install --locked "${profile[@]}" --path crates/tollgate-server --root "$root"
bin="$root/bin/tollgate"
if [ ${#profile[@]} -eq 0 ] && readelf -S "$bin" | grep -q '\.debug_'; then
  # the release profile ships without debug info (Cargo.toml, profile.release)
  echo "package-check: the installed release binary carries debug info" >&2
  exit 1
fi
out=$("$bin" --version)
[ "$out" = "tollgate $version" ] || {
  echo "package-check: tollgate --version said '$out', not 'tollgate $version'" >&2
  exit 1
}
"$bin" validate --config examples/tollgate.toml
echo "package-check: installed $out, $(stat -c %s "$bin") bytes"
