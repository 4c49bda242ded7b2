#!/usr/bin/env bash
# The agent's OCI image (issue 25; `make image`; docs/container.md), built FROM scratch with
# podman (Debian's 4.x: no registry is reachable, so no base image could be pulled anyway).
#
#   scripts/build-image.sh [--tag TAG] [--archive FILE|DIR] [--storage DIR] [--storage-driver D] ITHBAT
#
# Assembles a root file system from the built binary ITHBAT: the binary stripped (as the Debian
# package ships it), every shared library `ldd` lists with the symlinks that lead to it (so
# sonames and a merged-/usr /lib stay as on the build host), the dynamic loader at the binary's
# ELF interpreter path, root-only /etc/passwd and /etc/group, /etc/nsswitch.conf, an empty /tmp,
# and the licences (Ithbat's, and each bundled Debian library's copyright file). No shell, no
# package manager. Then builds packaging/image/Containerfile over it as localhost/ithbat:VERSION.
#   --tag TAG            the image's name (default localhost/ithbat:VERSION, VERSION from `ITHBAT --version`)
#   --archive FILE|DIR   also `podman save --format oci-archive` it (a directory: ithbat-image_VERSION_ARCH.oci.tar
#                        in it), for `podman load` / `skopeo copy` on an air-gapped machine
#   --storage DIR        a private containers storage under DIR instead of the machine's (the test's)
#   --storage-driver D   vfs (default) or overlay; see below
# SOURCE_DATE_EPOCH, when set, fixes the image's creation time and file times (reproducible builds).
#
# Storage driver: vfs, chosen explicitly. It keeps each layer as a plain directory: no kernel
# mount, so it works in any sandbox or nested container, and a build or test that dies leaves no
# mount behind. overlay also works as root on this machine, but mounts the storage's own
# directory and each layer (left mounted when a run is killed), and fails where overlayfs is not
# allowed (unprivileged or nested containers, an overlayfs root). vfs copies a layer whole per
# image, which costs nothing for this one-layer image. A machine whose storage already holds
# overlay images must say --storage-driver overlay (podman refuses to mix them in one storage).
set -euo pipefail

usage() {
  echo "usage: $(awk '/^#   / { sub(/^#   /, ""); print; exit }' "$0")" >&2
  exit 2
}

tag="" archive="" storage="" driver=vfs
while (($#)); do
  case $1 in
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --archive) archive=${2:?--archive needs a value}; shift 2 ;;
    --storage) storage=${2:?--storage needs a value}; shift 2 ;;
    --storage-driver) driver=${2:?--storage-driver needs a value}; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "build-image: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 1)) || usage
bin=$1
here=$(cd "$(dirname "$0")/.." && pwd)

die() {
  echo "build-image: $*" >&2
  exit 1
}
for tool in podman ldd ldconfig readelf strip; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (scripts/install-deps.sh installs it)"
done
[[ -x $bin ]] || die "$bin is not an executable (build the ithbat target first)"
[[ $driver == vfs || $driver == overlay ]] || die "--storage-driver must be vfs or overlay, not $driver"

version=$("$bin" --version | awk 'NR == 1 { print $2 }')
[[ $version =~ ^[0-9A-Za-z.+~-]+$ ]] || die "'$bin --version' gave no version ('$version')"
tag=${tag:-localhost/ithbat:$version}
# The build tree's binary may carry a RUNPATH into the build tree; the image would then look
# for libraries at a path that does not exist in it.
# (Read whole before grep: grep -q stops at its match and pipefail would count readelf's SIGPIPE.)
dynamic=$(readelf -d "$bin")
if grep -Eq '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then
  die "$bin has an RPATH/RUNPATH ($(grep -E '\(R(UN)?PATH\)' <<<"$dynamic")); build it without one"
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/ithbat-image-XXXXXX")
trap 'rm -rf "$stage"' EXIT
rootfs=$stage/rootfs
mkdir -p "$rootfs"
chmod 0755 "$stage" "$rootfs"
umask 022

# copy_path PATH: PATH into the rootfs as the host has it. Each symlink met on the way (the
# soname libfoo.so.1 -> libfoo.so.1.2.3, a merged-/usr /lib -> usr/lib, /lib64/ld-linux...
# -> ../lib/...) is made the same symlink, then followed; the file it ends at is copied.
# Symlinks are recreated, never followed inside the rootfs, so an absolute one cannot lead
# a write out of it.
copy_path() {
  local path=$1 depth=${2:-0} prefix="" cur target rest i
  ((depth < 40)) || die "too many symlinks resolving $1"
  local -a comps
  IFS=/ read -ra comps <<<"${path#/}"
  for ((i = 0; i < ${#comps[@]}; i++)); do
    [[ -n ${comps[i]} ]] || continue
    cur="$prefix/${comps[i]}"
    if [[ -L $cur ]]; then
      target=$(readlink "$cur")
      [[ -L $rootfs$cur ]] || ln -s "$target" "$rootfs$cur"
      rest=$(IFS=/; echo "${comps[*]:i+1}")
      [[ $target == /* ]] || target="$prefix/$target"
      # Lexical clean-up of ".." is right here: every component of $prefix was checked not
      # to be a symlink.
      copy_path "$(realpath -s -m "$target${rest:+/$rest}")" $((depth + 1))
      return
    fi
    if ((i < ${#comps[@]} - 1)); then
      [[ -d $cur ]] || die "$cur is not a directory"
      [[ -d $rootfs$cur ]] || install -d -m 0755 "$rootfs$cur"
    else
      [[ -f $cur ]] || die "$cur is not a regular file"
      [[ -e $rootfs$cur ]] || cp --preserve=mode "$cur" "$rootfs$cur"
    fi
    prefix=$cur
  done
}

# The binary, stripped the way CPack strips the Debian package's (strip's default, all
# symbols; the build ID note stays, so a debugger finds the build tree's symbols).
install -d -m 0755 "$rootfs/usr/bin"
strip -o "$rootfs/usr/bin/ithbat" "$bin"
chmod 0755 "$rootfs/usr/bin/ithbat"

# Its libraries: the loader named by PT_INTERP, and every `ldd` line "soname => /path (addr)"
# (the whole closure, resolved the way the loader resolves it on this host). libnvidia-ml and
# libcuda are not among them: the agent dlopens those at run time, from the host's driver.
interp=$(readelf -l "$bin" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')
[[ -n $interp ]] || die "$bin has no ELF interpreter (a static binary needs no libraries; this script expects a dynamic one)"
ldd_out=$(ldd "$bin") || die "ldd $bin failed"
if grep -q 'not found' <<<"$ldd_out"; then die "ldd: libraries not found: $(grep 'not found' <<<"$ldd_out")"; fi
mapfile -t libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$ldd_out")
((${#libs[@]} > 0)) || die "ldd listed no libraries for $bin"
# libcurl is dlopened at the first outgoing request (src/net/curl_api.h), so ldd of the binary
# does not list it: add it and its own closure, resolved through the loader's cache.
for soname in libcurl.so.4; do
  path=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64|x86_64|aarch64|AArch64/ { print $NF; exit }')
  [[ -n $path ]] || path=$(ldconfig -p | awk -v n="$soname" '$1 == n { print $NF; exit }')
  [[ -n $path && -e $path ]] || die "$soname (dlopened by the agent) is not installed"
  dl_ldd=$(ldd "$path") || die "ldd $path failed"
  if grep -q 'not found' <<<"$dl_ldd"; then die "ldd: libraries not found: $(grep 'not found' <<<"$dl_ldd")"; fi
  libs+=("$path")
  mapfile -t -O "${#libs[@]}" libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$dl_ldd")
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | awk '!seen[$0]++')
for lib in "$interp" "${libs[@]}"; do copy_path "$lib"; done

# glibc reads these to name users and resolve host names (the agent's UserName for job-output
# opt-outs, --listen by name). Only root and nobody: the container's users are not the node's
# (docs/container.md: mount the host's /etc/passwd to name job owners). /etc/hosts and
# resolv.conf come from the runtime.
install -d -m 0755 "$rootfs/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"
install -d -m 1777 "$rootfs/tmp"

# Licences: Ithbat's (Apache-2.0; the copyright file names the licence, LICENSE is its text),
# and the copyright file of each Debian package a bundled library came from, which its licence
# (LGPL for glibc, and others) asks to travel with the binary. With them, the packages' dpkg
# records in /var/lib/dpkg/status.d/ (the distroless layout), so image scanners see which
# library versions are inside.
install -d -m 0755 "$rootfs/usr/share/doc/ithbat"
install -m 0644 "$here/packaging/debian/copyright" "$rootfs/usr/share/doc/ithbat/copyright"
install -m 0644 "$here/LICENSE" "$rootfs/usr/share/doc/ithbat/LICENSE"
# pkg_of PATH: the Debian package that owns PATH (trying the /usr-merged twin: dpkg knows
# each file by the path its package ships, /lib/... or /usr/lib/...).
pkg_of() {
  local p candidates=("$1" "$(realpath "$1")")
  for p in "${candidates[@]}"; do
    case $p in /usr/*) candidates+=("${p#/usr}") ;; *) candidates+=("/usr$p") ;; esac
  done
  for p in "${candidates[@]}"; do
    dpkg-query -S "$p" 2>/dev/null | awk -F': ' 'NR == 1 { print $1 }' | grep . && return 0
  done
  return 1
}
if command -v dpkg-query >/dev/null 2>&1; then
  install -d -m 0755 "$rootfs/var/lib/dpkg/status.d"
  declare -A seen=()
  for lib in "$interp" "${libs[@]}"; do
    pkg=$(pkg_of "$lib") || die "no Debian package owns $lib (its licence could not be included)"
    name=${pkg%%:*}
    [[ -z ${seen[$name]:-} ]] || continue
    seen[$name]=1
    install -d -m 0755 "$rootfs/usr/share/doc/$name"
    [[ -f /usr/share/doc/$name/copyright ]] || die "/usr/share/doc/$name/copyright is missing ($lib)"
    # -L: a package's doc directory may be a symlink to its source package's.
    cp -L /usr/share/doc/"$name"/copyright "$rootfs/usr/share/doc/$name/copyright"
    chmod 0644 "$rootfs/usr/share/doc/$name/copyright"
    dpkg-query -s "$pkg" >"$rootfs/var/lib/dpkg/status.d/$name"
    chmod 0644 "$rootfs/var/lib/dpkg/status.d/$name"
  done
else
  die "dpkg-query not found: the bundled libraries' licences come from Debian's package records"
fi

revision=$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $revision != unknown ]] && [[ -n $(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  revision+="-dirty"
fi
source_url=$(git -C "$here" remote get-url origin 2>/dev/null || echo unknown)

podman_cmd=(podman --storage-driver "$driver")
if [[ -n $storage ]]; then
  mkdir -p "$storage"/{root,run,tmp,net}
  # Everything podman keeps (images, layers, its database, run state, events, the network
  # backend's lock) under $storage, and its large temporary files too (TMPDIR; /var/tmp otherwise).
  podman_cmd=(podman --root "$storage/root" --runroot "$storage/run" --tmpdir "$storage/tmp"
    --network-config-dir "$storage/net" --storage-driver "$driver" --events-backend none)
  export TMPDIR=$storage/tmp
fi
# --layers=false: only the final image is committed (with the cache on, each instruction leaves
# an unnamed image behind in the storage); --identity-label=false: no io.buildah.version label.
build_args=(--format oci --layers=false --identity-label=false --file "$here/packaging/image/Containerfile"
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url"
  --tag "$tag")
[[ -z ${SOURCE_DATE_EPOCH:-} ]] || build_args+=(--timestamp "$SOURCE_DATE_EPOCH")
if ! "${podman_cmd[@]}" build --quiet "${build_args[@]}" "$stage" >"$stage/build.log" 2>&1; then
  cat "$stage/build.log" >&2
  grep -q 'does not match our storage graph driver' "$stage/build.log" &&
    echo "build-image: this storage already uses another driver: pass --storage-driver (make image IMAGE_STORAGE_DRIVER=overlay)" >&2
  die "podman build failed"
fi

size_of() { stat -c %s "$1"; }
image_size=$("${podman_cmd[@]}" image inspect --format '{{.Size}}' "$tag")
echo "image:  $tag ($(("${image_size}" / 1024)) KiB; $(find "$rootfs" -type f | wc -l) files, ${#libs[@]} libraries + loader)"
echo "binary: $(($(size_of "$bin") / 1024)) KiB built, $(($(size_of "$rootfs/usr/bin/ithbat") / 1024)) KiB stripped"

if [[ -n $archive ]]; then
  if [[ -d $archive || $archive == */ ]]; then
    mkdir -p "$archive"
    # Named like the Debian package (ithbat_<version>_<arch>.deb beside it).
    arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
    archive="${archive%/}/ithbat-image_${version}_${arch}.oci.tar"
  fi
  rm -f "$archive"
  "${podman_cmd[@]}" save --quiet --format oci-archive -o "$archive" "$tag" || die "podman save failed"
  echo "archive: $archive ($(($(size_of "$archive") / 1024)) KiB; podman load -i $(basename "$archive"))"
fi
