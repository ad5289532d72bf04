#!/usr/bin/env bash
# Debian packages some tests need: headless Chromium (web UI tab), a real Prometheus server
# (live exporter), PostgreSQL (the run catalog and its Grafana dashboard; the tests start their
# own throwaway cluster with initdb / pg_ctl, never the package's service) and libfaketime (a swarm
# worker whose clock runs seconds ahead, tests/test_swarm_netns.py). Installed when missing and we are root. Tests that need them skip locally with
# the reason when they are absent, and FAIL when CI=true (no skipped test hiding in CI).
set -uo pipefail
need=()
why=()
command -v chromium >/dev/null 2>&1 || { need+=(chromium); why+=("chromium: headless browser for the web UI tab tests"); }
command -v chromedriver >/dev/null 2>&1 || { need+=(chromium-driver); why+=("chromium-driver: drives that browser"); }
command -v prometheus >/dev/null 2>&1 || { need+=(prometheus); why+=("prometheus: a real server scraping the live exporter and the Grafana panels' queries"); }
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { need+=(postgresql); why+=("postgresql: a real server for the run catalog and the history dashboard's queries"); }
command -v faketime >/dev/null 2>&1 || { need+=(faketime); why+=("faketime: a worker whose wall clock is shifted by seconds (clock offset tests)"); }
if [ ${#need[@]} -eq 0 ]; then
  echo "ensure_system_deps: chromium, chromium-driver, prometheus, postgresql and faketime are present" >&2
  exit 0
fi
for line in "${why[@]}"; do echo "ensure_system_deps: needed — $line" >&2; done
if [ "$(id -u)" != "0" ]; then
  echo "ensure_system_deps: missing ${need[*]} and not root; the tests that need them will skip (fail in CI)" >&2
  exit 0
fi
echo "ensure_system_deps: installing with apt-get (as root): ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
  || echo "ensure_system_deps: apt-get install ${need[*]} failed" >&2
# The Debian prometheus package may start a service on :9090; tests run their own on free ports.
(service prometheus stop || systemctl stop prometheus) >/dev/null 2>&1 || true
# The same for PostgreSQL's cluster on :5432.
(service postgresql stop || systemctl stop postgresql) >/dev/null 2>&1 || true
exit 0
