#!/usr/bin/env bash
# Builds the tollgate container image from deploy/Containerfile with podman
# and prints the tag it built as its last line (docs/container.md).
#
#   deploy/build-image.sh [--local-bases | --public-bases] [--rebuild-bases]
#                         [--tag TAG] [-- EXTRA-PODMAN-BUILD-ARGS...]
#
# The Containerfile's two base images are build arguments. With the public
# ones (a Rust image and distroless cc, pulled from their registries) the
# build is the one a user runs anywhere. Where no registry is reachable
# (these CI machines), it makes both bases locally, once, and keeps them:
# - the builder: Debian bookworm by debootstrap from deb.debian.org, with
#   gcc, libc6-dev, pkg-config, ca-certificates, and this host's Rust
#   toolchain (cargo, rustc, the host's std) copied in;
# - the runtime: only libc, the loader, libgcc_s, libm, the CA roots,
#   passwd/group with `nonroot` (65532) and nsswitch.conf, taken from the
#   builder base (so the binary runs on the glibc it was linked against)
#   and imported with `podman import`. No shell, no package manager.
# Default: the public bases when present or pullable, else the local ones.
#
# Environment: PODMAN_GLOBAL_FLAGS (default `--runtime runc
# --cgroup-manager cgroupfs`, what podman needs on these machines; set it
# empty elsewhere), PODMAN_BUILD_ULIMITS (default nofile and nproc 1024:
# these machines refuse podman's defaults), BUILDER_IMAGE, RUNTIME_IMAGE
# (the public bases), DEBIAN_MIRROR, HOST_CA_BUNDLE (default this host's
# /etc/ssl/certs/ca-certificates.crt, mounted over the builder's during the
# build steps only, so cargo reaches crates.io through whatever TLS
# interception the host trusts; nothing of it lands in an image; empty:
# not mounted).
set -euo pipefail
cd "$(dirname "$0")/.."

bases=auto
rebuild_bases=0
tag=
extra=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --local-bases) bases=local ;;
    --public-bases) bases=public ;;
    --rebuild-bases) rebuild_bases=1 ;;
    --tag) tag="$2"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "build-image.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Word splitting of the flag strings is wanted: they are lists of flags.
read -r -a podman <<<"podman ${PODMAN_GLOBAL_FLAGS---runtime runc --cgroup-manager cgroupfs}"
read -r -a ulimits <<<"${PODMAN_BUILD_ULIMITS---ulimit nofile=1024:1024 --ulimit nproc=1024:1024}"
public_builder="${BUILDER_IMAGE:-docker.io/library/rust:1.95-bookworm}"
public_runtime="${RUNTIME_IMAGE:-gcr.io/distroless/cc-debian12:nonroot}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
host_ca="${HOST_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"

# The first `version = "..."` of the workspace manifest is
# [workspace.package]'s, the version every crate takes.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
source_url="$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
source_url="${source_url:-https://github.com/tollgate-rs/tollgate}"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
tag="${tag:-localhost/tollgate:$version}"

log() { echo "build-image.sh: $*" >&2; }

# What a failed or interrupted run leaves is removed on exit.
scratch=()
mounted=
cleanup() {
  if [ -n "$mounted" ]; then
    "${podman[@]}" image unmount "$mounted" >/dev/null 2>&1 || true
  fi
  if [ "${#scratch[@]}" -gt 0 ]; then
    rm -rf --one-file-system "${scratch[@]}"
  fi
}
trap cleanup EXIT

have_image() { "${podman[@]}" image exists "$1"; }

# Present, or pulled within a minute (an unreachable registry fails at
# once here: its name does not resolve).
present_or_pulled() {
  have_image "$1" || timeout 60 "${podman[@]}" pull -q "$1" >/dev/null 2>&1
}

host_triple="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')"
rust_version="$(rustc -vV 2>/dev/null | sed -n 's/^release: //p')"
local_builder="localhost/tollgate-base-builder:bookworm-rust-${rust_version:-none}"
local_runtime="localhost/tollgate-base-runtime:bookworm"
build_cache="localhost/tollgate-build-cache:latest"

# The builder base: debootstrap's minimal bookworm, the C toolchain a build
# script may need (mimalloc and ring compile C), and the host's toolchain.
make_builder_base() {
  if [ -z "$rust_version" ] || [ -z "$host_triple" ]; then
    log "no rustc on this host: cannot make the local builder base"
    exit 1
  fi
  local sysroot root
  sysroot="$(rustc --print sysroot)"
  root="$(mktemp -d /var/tmp/tollgate-builder-base.XXXXXX)"
  scratch+=("$root")
  log "making $local_builder: debootstrap bookworm from $mirror (a few minutes, once)"
  debootstrap --variant=minbase \
    --include=gcc,libc6-dev,pkg-config,ca-certificates,binutils \
    bookworm "$root" "$mirror" >&2
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  # Only what `cargo build` for this host needs: no docs, sources,
  # rustup, clippy or rustfmt.
  local dest="$root/usr/local/rust"
  mkdir -p "$dest/bin" "$dest/lib/rustlib" "$root/usr/local/cargo/bin"
  cp -a "$sysroot/bin/cargo" "$sysroot/bin/rustc" "$dest/bin/"
  cp -a "$sysroot"/lib/*.so* "$dest/lib/"
  cp -a "$sysroot/lib/rustlib/$host_triple" "$dest/lib/rustlib/"
  tar --numeric-owner -C "$root" -c . | "${podman[@]}" import \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change "LABEL org.opencontainers.image.description=debootstrap bookworm + rust $rust_version (tollgate local builder base)" \
    - "$local_builder" >/dev/null
}

# The runtime base, distroless-style, from the builder base's files.
make_runtime_base() {
  local mnt stage lib
  mnt="$("${podman[@]}" image mount "$local_builder")"
  mounted="$local_builder"
  stage="$(mktemp -d /var/tmp/tollgate-runtime-base.XXXXXX)"
  scratch+=("$stage")
  log "making $local_runtime from $local_builder's libc, CA roots and users"
  # bookworm's merged /usr: /lib and /lib64 are links into /usr; the
  # loader's path in every binary is /lib64/ld-linux-x86-64.so.2.
  mkdir -p "$stage/usr/lib/x86_64-linux-gnu" "$stage/usr/lib64" "$stage/etc/ssl/certs" \
    "$stage/usr/local/bin" "$stage/tmp" "$stage/root" "$stage/home/nonroot"
  ln -s usr/lib "$stage/lib"
  ln -s usr/lib64 "$stage/lib64"
  # What distroless cc ships of glibc, and libgcc_s (Rust's unwinder).
  for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libdl.so.2 \
    libpthread.so.0 librt.so.1 libresolv.so.2 libnss_dns.so.2 libnss_files.so.2; do
    cp -L "$mnt/usr/lib/x86_64-linux-gnu/$lib" "$stage/usr/lib/x86_64-linux-gnu/"
  done
  ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$stage/usr/lib64/ld-linux-x86-64.so.2"
  cp -L "$mnt/etc/ssl/certs/ca-certificates.crt" "$stage/etc/ssl/certs/"
  cp -L "$mnt/etc/os-release" "$stage/etc/os-release"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$stage/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$stage/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$stage/etc/nsswitch.conf"
  # Mount points podman fills in: present, so a read-only root needs none made.
  : >"$stage/etc/hosts"
  : >"$stage/etc/resolv.conf"
  : >"$stage/etc/hostname"
  chmod 1777 "$stage/tmp"
  chmod 0700 "$stage/root" "$stage/home/nonroot"
  chown 65532:65532 "$stage/home/nonroot"
  tar --numeric-owner -C "$stage" -c . | "${podman[@]}" import \
    --change 'USER 65532:65532' \
    --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'LABEL org.opencontainers.image.description=glibc, CA roots, nonroot user (tollgate local runtime base)' \
    - "$local_runtime" >/dev/null
}

if [ "$bases" = auto ]; then
  if present_or_pulled "$public_builder" && present_or_pulled "$public_runtime"; then
    bases=public
  else
    log "public base images not reachable: using local bases"
    bases=local
  fi
fi
if [ "$bases" = public ]; then
  builder="$public_builder"
  runtime="$public_runtime"
else
  if [ "$rebuild_bases" = 1 ] || ! have_image "$local_builder"; then
    make_builder_base
  fi
  if [ "$rebuild_bases" = 1 ] || ! have_image "$local_runtime"; then
    make_runtime_base
  fi
  builder="$local_builder"
  runtime="$local_runtime"
fi

volumes=()
if [ -n "$host_ca" ] && [ -f "$host_ca" ]; then
  volumes+=(-v "$host_ca:/etc/ssl/certs/ca-certificates.crt:ro")
fi

log "building $tag (builder $builder, runtime $runtime)"
build=("${podman[@]}" build "${ulimits[@]}" --network host
  "${volumes[@]}" -f deploy/Containerfile
  --build-arg "BUILDER_IMAGE=$builder"
  --build-arg "RUNTIME_IMAGE=$runtime"
  --build-arg "VERSION=$version"
  --build-arg "REVISION=$revision"
  --build-arg "SOURCE=$source_url")
# --network host: the builder fetches crates from crates.io; a private
# network namespace adds nothing to a build and needs more of the host.
# The builder stage first, tagged: its layers are the next build's cache
# (the sources are compared by content, so a fresh clone of the same tree
# rebuilds nothing), and the stages of earlier builds, untagged now, are
# removed (about 100 MB each: the sources and the unstripped binary). The
# cache mounts keep the crates and the target directory either way.
"${build[@]}" --target builder -t "$build_cache" "${extra[@]}" . >&2
"${build[@]}" -t "$tag" "${extra[@]}" . >&2
"${podman[@]}" image prune -f --filter label=io.tollgate.stage=builder >/dev/null
echo "$tag"
