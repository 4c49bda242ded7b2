#!/usr/bin/env bash
# Issue 25: the Debian package installs on a clean Debian 12, not only on the machine that built
# it. A minimal root made by debootstrap (bookworm, variant minbase: no systemd, no libraries of
# ours) gets the package with apt, which must find every dependency the package declares in
# Debian's archive; then, in that root (chroot, a private mount namespace with /proc, /sys and
# /dev of the host), the agent runs with the installed config (`--once`: systemd is not PID 1
# there), the Slurm hooks run and exit 0, and `apt-get purge` removes every file.
#
# Needs root, debootstrap, and Debian's archive (the mirror apt uses on this machine): CI's
# machines reach it. Takes about two minutes, most of it debootstrap.
source "$(dirname "$0")/common.bash"
require cpack
require debootstrap
require unshare
[[ $(id -u) -eq 0 ]] || fail "needs root: debootstrap and chroot"
build=$(cd "$(dirname "$ITHBAT")" && pwd)
[[ -f $build/CPackConfig.cmake ]] || fail "no CPackConfig.cmake in $build (configure with CMake first)"

# The mirror this machine's apt uses (deb822 sources first, then sources.list).
mirror=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || mirror=http://deb.debian.org/debian

(cd "$WORK" && cpack -G DEB --config "$build/CPackConfig.cmake" -D CPACK_OUTPUT_FILE_PREFIX="$WORK/pkg") >"$WORK/cpack.log" 2>&1 ||
  fail "cpack failed"
deb=$(ls "$WORK"/pkg/ithbat_*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || fail "cpack made no ithbat_*.deb"

root="$WORK/root"
start=$SECONDS
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
  fail "debootstrap bookworm from $mirror failed: $(tail -3 "$WORK/debootstrap.log")"
echo "clean root: debootstrap minbase bookworm from $mirror in $((SECONDS - start)) s"
[[ ! -e $root/usr/bin/ithbat && ! -e $root/usr/lib/x86_64-linux-gnu/libbpf.so.1 ]] || fail "the root is not clean"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Package scripts must not start services in the root (there is no init in it anyway).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cp "$deb" "$root/tmp/ithbat.deb"

# in_root COMMAND...: runs COMMAND in the root, in a mount namespace of its own with the host's
# /proc, /sys and /dev (gone when it exits: nothing to unmount, however the test ends).
in_root() {
  unshare --mount --propagation private sh -c '
    root=$1; shift
    mount --rbind /proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev" &&
      exec chroot "$root" "$@"' in_root "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    DEBIAN_FRONTEND=noninteractive "$@"
}

start=$SECONDS
in_root apt-get update -qq >"$WORK/apt-update.log" 2>&1 || fail "apt-get update in the root failed: $(tail -3 "$WORK/apt-update.log")"
in_root apt-get install -y -qq --no-install-recommends /tmp/ithbat.deb >"$WORK/apt-install.log" 2>&1 ||
  fail "apt-get install of the package in the clean root failed: $(tail -5 "$WORK/apt-install.log")"
echo "installed with its dependencies in $((SECONDS - start)) s: $(grep -c '^Setting up' "$WORK/apt-install.log") packages set up"

in_root /usr/bin/ithbat --version >"$WORK/version.txt" 2>&1 || fail "ithbat --version in the root: $(cat "$WORK/version.txt")"
[[ $(head -1 "$WORK/version.txt") == "ithbat "* ]] || fail "--version printed: $(cat "$WORK/version.txt")"
in_root getent passwd ithbat >/dev/null || fail "the hub's user ithbat was not created"
# The installed agent with the installed config; eBPF collectors off (the root has no kernel
# headers to lack, but this test is about the package, capabilities.sh about the collectors).
in_root /usr/bin/ithbat agent --config /etc/ithbat/agent.toml --once --interval 200ms --kmsg "" --joblog off \
  --sched-io off --data-dir "" --log-level warn >"$WORK/once.txt" 2>"$WORK/once.log" ||
  fail "the installed agent with the installed config failed in the clean root"
grep -q '^ithbat_build_info{' "$WORK/once.txt" || fail "the installed agent exposes no ithbat_build_info"
grep -q '^ithbat_host_memory_total_bytes' "$WORK/once.txt" || fail "the installed agent read no host memory"
# The Slurm hooks, run the way slurmd runs them but outside a job: they report and exit 0.
for hook in prolog epilog; do
  in_root /usr/lib/ithbat/slurm/$hook >"$WORK/$hook.out" 2>&1 || fail "the installed Slurm $hook exited non-zero"
  grep -q 'the job goes on' "$WORK/$hook.out" || fail "the $hook said: $(cat "$WORK/$hook.out")"
done

in_root apt-get purge -y -qq ithbat >"$WORK/purge.log" 2>&1 || fail "apt-get purge failed: $(tail -3 "$WORK/purge.log")"
for f in /usr/bin/ithbat /etc/ithbat /etc/default/ithbat-hub /lib/systemd/system/ithbat-agent.service \
  /usr/share/ithbat /usr/lib/ithbat /var/lib/ithbat; do
  [[ ! -e $root$f ]] || fail "$f is left in the root after apt-get purge"
done
echo "clean root: installed, ran and purged cleanly"
