#!/usr/bin/env bash
# Issue 25: `make image` gives an OCI image that runs the agent. Builds it from this binary with
# scripts/build-image.sh into a containers storage of the test's own (under $WORK, driver vfs:
# no mounts; the machine's storage is never touched), then checks what a registry and a node
# would see: the labels and the command line (podman inspect), and the file system, exported
# with podman create + podman export: only the expected files (the stripped binary, the
# libraries ldd lists and their loader, passwd/group/nsswitch.conf, /tmp, licences), no shell.
# Containers cannot run on these machines (crun: setrlimit ... Operation not permitted), so
# the exported file system is run with chroot instead, the way a container runtime would:
#   1. `ithbat --version`;
#   2. the image's own ENTRYPOINT + CMD with --once, the fixture /proc and /sys trees at
#      /host/proc and /host/sys (where the DaemonSet mounts the host's), a token file where
#      the CMD names it, and the fake libnvidia-ml.so.1 where the NVIDIA container toolkit puts
#      the host's: the default soname must find it (8 GPUs) with no ld.so.cache in the image;
#   3. the same in a private mount namespace with the real /proc and /sys (gone with the
#      process, nothing to unmount): the eBPF collectors load from the image's libbpf.
# Prints the image, archive and binary sizes, and each --once run's wall time beside the
# build tree's.
source "$(dirname "$0")/common.bash"
for tool in podman ldd readelf strip chroot tar unshare python3; do require "$tool"; done
[[ $(id -u) -eq 0 ]] || fail "needs root: the containers storage, chroot and the eBPF collectors"
fake_node_tools
here=$(cd "$(dirname "$0")/../.." && pwd)

store="$WORK/containers"
# TMPDIR: podman's large temporary files (load, save) go there, not to /var/tmp.
podman=(env TMPDIR="$store/tmp" podman --root "$store/root" --runroot "$store/run" --tmpdir "$store/tmp"
  --network-config-dir "$store/net" --storage-driver vfs --events-backend none)
# However the test ends: no container or image left in its storage (rm -rf of $WORK follows),
# and nothing mounted under $WORK (vfs mounts nothing; this catches a change that does).
remove_storage() {
  "${podman[@]}" rm --all --force >/dev/null 2>&1 || true
  "${podman[@]}" rmi --all --force >/dev/null 2>&1 || true
  awk -v w="$WORK" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" || echo "could not unmount $m" >&2
  done
  # podman build (buildah) keeps its digest cache at /var/lib/containers/cache whatever --root
  # says; where the test made that directory, it takes it away again (rmdir: only if empty).
  if [[ $had_var_lib_containers == no ]]; then
    rm -f /var/lib/containers/cache/blob-info-cache-v1.boltdb
    rmdir /var/lib/containers/cache /var/lib/containers 2>/dev/null || true
  fi
}
had_var_lib_containers=$([[ -e /var/lib/containers ]] && echo yes || echo no)
# set +e: under errexit the `(exit $rc)` that hands cleanup the status would end the trap there.
trap 'rc=$?; remove_storage; set +e; (exit $rc); cleanup' EXIT

version=$("$ITHBAT" --version | awk 'NR == 1 { print $2 }')
tag="localhost/ithbat:$version"
start=$SECONDS
bash "$here/scripts/build-image.sh" --storage "$store" --archive "$WORK/image.oci.tar" "$ITHBAT" \
  >"$WORK/build.log" 2>&1 || fail "scripts/build-image.sh failed: $(tail -5 "$WORK/build.log")"
sed 's/^/  /' "$WORK/build.log"
echo "image built in $((SECONDS - start)) s"
[[ -s $WORK/image.oci.tar ]] || fail "no OCI archive written"
# Listings are read whole before grep -q, which stops at its match (common.bash says why).
tar -tf "$WORK/image.oci.tar" >"$WORK/archive.txt"
grep -qx 'index.json' "$WORK/archive.txt" || fail "the archive is not an OCI layout (no index.json)"

# What a registry shows: labels, entry point, defaults, no USER (root: see the Containerfile).
"${podman[@]}" image inspect "$tag" >"$WORK/inspect.json" || fail "podman image inspect $tag failed"
python3 - "$WORK/inspect.json" "$version" >"$WORK/cmdline" <<'PY' || fail "image config: $(cat "$WORK/cmdline")"
import json, sys
img = json.load(open(sys.argv[1]))[0]
cfg, labels, want = img["Config"], img["Config"].get("Labels") or {}, sys.argv[2]
def need(ok, what):
    if not ok:
        print(what)
        sys.exit(1)
need(labels.get("org.opencontainers.image.version") == want, f"version label {labels.get('org.opencontainers.image.version')!r}, want {want!r}")
need(labels.get("org.opencontainers.image.licenses") == "Apache-2.0", "licenses label is not Apache-2.0")
for key in ("title", "source", "revision", "description"):
    need(labels.get(f"org.opencontainers.image.{key}"), f"no org.opencontainers.image.{key} label")
need(cfg.get("Entrypoint") == ["/usr/bin/ithbat"], f"entrypoint {cfg.get('Entrypoint')}")
cmd = cfg.get("Cmd") or []
need(cmd[:1] == ["agent"], f"cmd {cmd}")
for flag, value in (("--procfs", "/host/proc"), ("--sysfs", "/host/sys")):
    need(flag in cmd and cmd[cmd.index(flag) + 1] == value, f"cmd lacks {flag} {value}: {cmd}")
need("--token-file" in cmd, f"cmd listens beyond loopback without --token-file: {cmd}")
need(not cfg.get("User") or cfg.get("User") in ("0", "root"), f"user {cfg.get('User')}")
need(img.get("Architecture"), "no architecture")
print("\n".join(cfg["Entrypoint"] + cmd))
PY
mapfile -t cmdline <"$WORK/cmdline"
token_file=$(awk 'prev == "--token-file" { print; exit } { prev = $0 }' "$WORK/cmdline")

# The file system a container gets, exported from a created (never started) container.
cid=$("${podman[@]}" create --network none "$tag") || fail "podman create $tag failed"
"${podman[@]}" export -o "$WORK/rootfs.tar" "$cid" || fail "podman export failed"
tar --numeric-owner -tvf "$WORK/rootfs.tar" >"$WORK/listing.txt"
if awk '$2 != "0/0"' "$WORK/listing.txt" | grep .; then fail "files not owned by root in the image"; fi
tar -tf "$WORK/rootfs.tar" | sed 's|/$||' | sort >"$WORK/files.txt"
# Every library name the image may hold: each soname ldd lists for the binary and for libcurl
# (dlopened at the first request, src/net/curl_api.h), the file it resolves to on the build
# host, and the loader; the image's own copy must be one of them.
curl_path=$(ldconfig -p | awk '$1 == "libcurl.so.4" { print $NF; exit }')
[[ -n $curl_path ]] || fail "libcurl.so.4 is not installed on this host"
allowed_libs=$({
  ldd "$ITHBAT"
  echo "	libcurl.so.4 => $curl_path (0x0)"
  ldd "$curl_path"
} | awk '$2 == "=>" && $3 ~ /^\// { print $1; print $3 }' | while read -r p; do
  basename "$p"
  if [[ $p == /* ]]; then basename "$(realpath "$p")"; fi
done | sort -u)
interp=$(readelf -l "$ITHBAT" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')
allowed_libs+=$'\n'$(basename "$interp")$'\n'$(basename "$(realpath "$interp")")
unexpected=()
while read -r f; do
  case $f in
    etc | etc/passwd | etc/group | etc/nsswitch.conf | tmp | usr | usr/bin | usr/bin/ithbat) continue ;;
    lib | lib64 | usr/lib | usr/lib64) continue ;;
    usr/share | usr/share/doc | usr/share/doc/ithbat/LICENSE | var | var/lib | var/lib/dpkg | var/lib/dpkg/status.d) continue ;;
  esac
  # The multiarch library directory; licences (a directory per package, its copyright file)
  # and dpkg records, one level deep.
  [[ $f =~ ^(usr/)?lib/[^/]+-linux-gnu$ ]] && continue
  [[ $f =~ ^usr/share/doc/[^/]+(/copyright)?$ || $f =~ ^var/lib/dpkg/status\.d/[^/]+$ ]] && continue
  # Libraries: only the names ldd gave, in a library directory.
  [[ $f =~ ^(usr/)?lib(64|/[^/]+-linux-gnu)?/[^/]+$ ]] && grep -qxF "$(basename "$f")" <<<"$allowed_libs" && continue
  unexpected+=("$f")
done <"$WORK/files.txt"
((${#unexpected[@]} == 0)) || fail "unexpected files in the image: ${unexpected[*]}"
for f in usr/bin/ithbat etc/passwd etc/nsswitch.conf usr/share/doc/ithbat/copyright usr/share/doc/ithbat/LICENSE \
  usr/share/doc/libc6/copyright; do
  grep -qxF "$f" "$WORK/files.txt" || fail "the image lacks /$f"
done
if grep -E '(^|/)(sh|bash|dash|busybox|ldconfig|libnvidia-ml[^/]*|libcuda[^/]*)$' "$WORK/files.txt"; then
  fail "a shell, ldconfig or an NVIDIA driver library is in the image"
fi

root="$WORK/rootfs"
mkdir "$root"
tar -C "$root" -xf "$WORK/rootfs.tar"
"${podman[@]}" rm "$cid" >/dev/null
[[ ! -e $root/bin/sh && ! -L $root/bin/sh && ! -e $root/usr/bin/sh ]] || fail "the image has /bin/sh"
bin="$root/usr/bin/ithbat"
sections=$(readelf -S "$bin")
if grep -Eq '\.(debug_info|symtab)\b' <<<"$sections"; then fail "the image's binary is not stripped"; fi
dynamic=$(readelf -d "$bin")
if grep -Eq '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then fail "the image's binary has an RPATH/RUNPATH"; fi
image_size=$("${podman[@]}" image inspect --format '{{.Size}}' "$tag")
# The air-gapped route: the archive loads back as the same image (same config digest), named.
image_id=$("${podman[@]}" image inspect --format '{{.Id}}' "$tag")
"${podman[@]}" rmi "$tag" >/dev/null || fail "podman rmi $tag failed"
"${podman[@]}" load --quiet -i "$WORK/image.oci.tar" >"$WORK/load.log" 2>&1 || fail "podman load: $(cat "$WORK/load.log")"
[[ $("${podman[@]}" image inspect --format '{{.Id}}' "$tag" 2>/dev/null) == "$image_id" ]] ||
  fail "the OCI archive did not load back as $tag ($image_id): $(cat "$WORK/load.log")"
echo "image: $tag, $(($(wc -l <"$WORK/files.txt"))) entries, $((image_size / 1024)) KiB" \
  "(OCI archive $(($(stat -c %s "$WORK/image.oci.tar") / 1024)) KiB)"
echo "binary: $(($(stat -c %s "$bin") / 1024)) KiB stripped in the image, $(($(stat -c %s "$ITHBAT") / 1024)) KiB in the build tree"

# 1. The binary runs in its own file system: the loader and every library resolve from it.
got=$(chroot "$root" /usr/bin/ithbat --version 2>&1) || fail "chroot ... ithbat --version: $got"
[[ $(head -1 <<<"$got") == "ithbat $version" ]] || fail "--version in the image printed: $(head -1 <<<"$got")"
# libcurl is dlopened (src/net/curl_api.h), so ldd of the binary does not bring it: the image
# must carry it and its closure, or every outgoing request fails there.
grep -q "libcurl [0-9]" <<<"$got" || fail "libcurl is not loadable in the image: $(grep -o 'libcurl [^,]*' <<<"$got")"

# 2. The image's command line as a DaemonSet pod runs it: the host trees at /host/proc and
# /host/sys (here the fixture trees), the token Secret at its path (a regular file, 0600; --once
# serves nothing and so does not read it), the driver's NVML where the container toolkit mounts
# it (here the fake, whose own libraries must be in the image already).
fixtures="$here/tests/collect/fixtures"
mkdir -p "$WORK/proc" "$WORK/sys" "$root/host" "$root/proc" "$root/sys" "$(dirname "$root$token_file")"
cp -r "$fixtures/host/normal/." "$fixtures/node/normal/." "$WORK/proc/"
cp -r "$fixtures/node/sysfs/." "$WORK/sys/"
cp -r "$WORK/proc" "$root/host/proc"
cp -r "$WORK/sys" "$root/host/sys"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$root$token_file")
libdir=$(dirname "$(grep -m1 -E '/libc\.so\.6$' "$WORK/files.txt")")
cp "$fake" "$root/$libdir/libnvidia-ml.so.1"
if ldd "$fake" | awk '$2 == "=>" { print $1 }' | while read -r need; do
  [[ -e $root/$libdir/$need ]] || echo "$need"
done | grep .; then fail "the fake NVML needs libraries the image lacks (above)"; fi
# Stops this collector and that: the Xid log (no /dev/kmsg in the chroot), history (none).
once=(--once --interval 200ms --log-level warn --kmsg "")

run_once() { # NAME COMMAND...: one --once run, its /metrics in NAME.prom, wall time in ms in NAME.ms
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s%N)
  "$@" >"$WORK/$name.prom" 2>"$WORK/$name.log" || rc=$?
  echo $((($(date +%s%N) - t0) / 1000000)) >"$WORK/$name.ms"
  ((rc == 0)) || fail "$name: agent --once exited $rc: $(tail -3 "$WORK/$name.log")"
}
value() { awk -v s="$2" '$1 == s { print $2; exit }' "$WORK/$1.prom"; }

run_once image chroot "$root" "${cmdline[@]}" "${once[@]}"
grep -q "^ithbat_build_info{.*[{,]version=\"$version\"[,}]" "$WORK/image.prom" || fail "no ithbat_build_info with version $version"
[[ $(value image 'ithbat_collector_up{collector="gpu"}') == 1 ]] ||
  fail "the gpu collector is not up: the toolkit-placed libnvidia-ml.so.1 was not found ($(grep -i nvml "$WORK/image.log" | head -2))"
gpus=$(grep -c '^ithbat_gpu_info{' "$WORK/image.prom" || true)
((gpus == 8)) || fail "the fake node shows $gpus GPUs from the image (want 8)"
mem_kb=$(awk '$1 == "MemTotal:" { print $2 }' "$root/host/proc/meminfo")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) == float(sys.argv[2]) * 1024 else 1)' \
  "$(value image ithbat_host_memory_total_bytes)" "$mem_kb" ||
  fail "ithbat_host_memory_total_bytes is not /host/proc/meminfo's MemTotal: --procfs from the CMD not used"
grep -q '^ithbat_ib_port_state{device="mlx5_0",port="1",' "$WORK/image.prom" ||
  fail "no InfiniBand port from /host/sys: --sysfs from the CMD not used"

# 3. Real /proc and /sys, mounted as a runtime mounts them (and the DaemonSet the host's), in a
# mount namespace of its own: the eBPF collectors load from the image's libbpf and the kernel's
# BTF at /sys/kernel/btf/vmlinux.
rm -rf "$root/host/proc" "$root/host/sys"
mkdir -p "$root/host/proc" "$root/host/sys"
# shellcheck disable=SC2016  # expanded by the inner bash
run_once kernel unshare --mount --propagation private -- bash -c '
  root=$1; shift
  mount --rbind /proc "$root/proc" && mount --rbind /sys "$root/sys" &&
    mount --rbind /proc "$root/host/proc" && mount --rbind /sys "$root/host/sys" || exit 90
  exec chroot "$root" "$@"' _ "$root" "${cmdline[@]}" "${once[@]}"
for collector in joblog probes sched_io; do
  d=$(value kernel "ithbat_collector_degraded{collector=\"$collector\"}")
  [[ $d == 0 ]] || fail "collector $collector is degraded ($d) from the image: $(grep -i "$collector" "$WORK/kernel.log" | head -2)"
done
[[ $(value kernel 'ithbat_collector_up{collector="host"}') == 1 ]] || fail "the host collector is not up on the real /proc"

# The same --once from the build tree (unstripped), for the wall time beside the image's.
run_once tree "$ITHBAT" agent --procfs /proc --sysfs /sys --nvml-library "$fake" "${once[@]}"
echo "agent --once wall time (real /proc, eBPF, fake NVML; 2 ticks of 200 ms): $(cat "$WORK/kernel.ms") ms" \
  "from the image, $(cat "$WORK/tree.ms") ms from the build tree; with the fixture trees: $(cat "$WORK/image.ms") ms"
echo "OCI image: labels, command line and $(wc -l <"$WORK/files.txt") entries as expected, no shell;" \
  "the image's agent ran from its exported file system ($gpus GPUs, eBPF collectors up)"
