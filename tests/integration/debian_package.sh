#!/usr/bin/env bash
# Issue 25: `make package` gives a Debian package an operator can install, run and remove.
# Builds it with cpack from this build tree, then: its control data (dependencies from
# dpkg-shlibdeps, conffiles), its files (stripped binary, units, config, dashboard, alerts,
# copyright); the binary runs from the unpacked tree (`--version`, `agent --once`); then a real
# `dpkg -i` on this machine (root, as CI runs it): the hub's system user exists, nothing was
# started or enabled, systemd accepts both units, the installed agent collects; `dpkg --purge`
# leaves none of its files behind.
source "$(dirname "$0")/common.bash"
require cpack
require dpkg-deb
require readelf
[[ $(id -u) -eq 0 ]] || fail "needs root: it installs and purges the package"
build=$(cd "$(dirname "$ITHBAT")" && pwd)
[[ -f $build/CPackConfig.cmake ]] || fail "no CPackConfig.cmake in $build (configure with CMake first)"

(cd "$WORK" && cpack -G DEB --config "$build/CPackConfig.cmake" -D CPACK_OUTPUT_FILE_PREFIX="$WORK/pkg") >"$WORK/cpack.log" 2>&1 ||
  fail "cpack failed"
deb=$(ls "$WORK"/pkg/ithbat_*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || fail "cpack made no ithbat_*.deb"
echo "package: $(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB"

dpkg-deb --info "$deb" >"$WORK/info.txt"
grep -q '^ Package: ithbat$' "$WORK/info.txt" || fail "package name is not ithbat"
depends=$(grep '^ Depends:' "$WORK/info.txt" || true)
[[ $depends == *libc6* && $depends == *adduser* ]] || fail "Depends lacks libc6 (shlibdeps) or adduser: $depends"
# libcurl is dlopened (src/net/curl_api.h): shlibdeps cannot see it, the control file must name it.
[[ $depends == *libcurl4* ]] || fail "Depends lacks libcurl4 (dlopened at the first request): $depends"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$WORK/conffiles" || fail "no conffiles"
grep -qx /etc/ithbat/agent.toml "$WORK/conffiles" || fail "/etc/ithbat/agent.toml is not a conffile"

dpkg-deb --contents "$deb" | awk '{print $NF}' >"$WORK/contents.txt"
for f in ./usr/bin/ithbat ./lib/systemd/system/ithbat-agent.service ./lib/systemd/system/ithbat-hub.service \
  ./etc/ithbat/agent.toml ./etc/default/ithbat-hub ./usr/share/ithbat/grafana/ithbat-dashboard.json \
  ./usr/share/ithbat/prometheus/ithbat-alerts.yml ./usr/share/doc/ithbat/copyright \
  ./usr/lib/ithbat/slurm/prolog ./usr/lib/ithbat/slurm/epilog; do
  grep -qx "$f" "$WORK/contents.txt" || fail "the package lacks $f"
done
# Nothing of the test and simulator world (fake libraries, lab) in a production package.
if grep -E 'fake|libnvidia-ml|libcuda|ithbat_lab|ithbat-sim' "$WORK/contents.txt"; then fail "test files in the package"; fi

dpkg-deb -x "$deb" "$WORK/root"
bin="$WORK/root/usr/bin/ithbat"
sections=$(readelf -S "$bin")
if grep -q '\.debug_info' <<<"$sections"; then fail "the packaged binary is not stripped"; fi
size=$(stat -c %s "$bin")
echo "binary: $((size / 1024 / 1024)) MiB stripped (build tree: $(($(stat -c %s "$ITHBAT") / 1024 / 1024)) MiB)"
version=$("$bin" --version) || fail "the unpacked binary does not run --version"
[[ $version == "ithbat "* ]] || fail "--version printed: $version"
grep -q '^ExecStart=/usr/bin/ithbat agent ' "$WORK/root/lib/systemd/system/ithbat-agent.service" ||
  fail "the packaged agent unit does not start /usr/bin/ithbat"
grep -qx 'exec /usr/bin/ithbat slurm-hook prolog' "$WORK/root/usr/lib/ithbat/slurm/prolog" ||
  fail "the packaged Slurm prolog does not run /usr/bin/ithbat slurm-hook prolog"

# A real install on this machine.
if dpkg-query -W -f='${Status}' ithbat 2>/dev/null | grep -q 'installed'; then
  fail "a package named ithbat is installed on this machine already; this test installs and purges its own"
fi
purge() { dpkg --purge ithbat >"$WORK/purge.log" 2>&1; }
# Purged however the test ends; cleanup still sees the test's own exit status.
trap 'rc=$?; set +e; purge; (exit $rc); cleanup' EXIT
dpkg -i "$deb" >"$WORK/install.log" 2>&1 || fail "dpkg -i failed"
getent passwd ithbat >/dev/null || fail "the hub's system user ithbat was not created"
[[ $(getent passwd ithbat | cut -d: -f7) == */nologin || $(getent passwd ithbat | cut -d: -f7) == /bin/false ]] ||
  fail "the ithbat user has a login shell"
# Nothing started, nothing enabled.
if pgrep -f '^/usr/bin/ithbat ' >/dev/null; then fail "installing started an ithbat process"; fi
[[ ! -e /etc/systemd/system/multi-user.target.wants/ithbat-agent.service ]] || fail "installing enabled the agent"
systemd-analyze verify /lib/systemd/system/ithbat-agent.service /lib/systemd/system/ithbat-hub.service \
  >"$WORK/verify.log" 2>&1 || fail "systemd-analyze verify refused the units"
if grep -i 'ithbat' "$WORK/verify.log"; then fail "systemd-analyze verify complained about the units"; fi
/usr/bin/ithbat agent --config /etc/ithbat/agent.toml --once --interval 200ms --kmsg "" --log-level warn \
  --data-dir "" >"$WORK/once.txt" 2>"$WORK/once.log" || fail "the installed agent with the installed config failed"
grep -q '^ithbat_build_info{' "$WORK/once.txt" || fail "the installed agent exposes no ithbat_build_info"

purge || fail "dpkg --purge failed"
for f in /usr/bin/ithbat /etc/ithbat/agent.toml /etc/default/ithbat-hub /lib/systemd/system/ithbat-agent.service \
  /usr/share/ithbat /usr/lib/ithbat /var/lib/ithbat; do
  [[ ! -e $f ]] || fail "$f is left after dpkg --purge"
done
echo "installed, ran and purged cleanly"
