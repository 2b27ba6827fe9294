#!/usr/bin/env bash
# vuln-selftest: make vuln tells its three outcomes apart. Against a local
# database with one (fake) entry for a function the image module calls it
# fails as "found vulnerabilities"; against a database that cannot be
# reached it is skipped with exit 0. Only the small image module is scanned.
set -uo pipefail
cd "$(dirname "$0")/.."
fail() { echo "vuln-selftest: $*" >&2; exit 1; }

out=$(VULN_DIRS=deploy/image VULNDB="file://$PWD/deploy/testdata/vulndb" ./deploy/vuln.sh 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "GO-2099-0001" <<<"$out" && grep -q "found vulnerabilities" <<<"$out" ||
	fail "with a finding: exit $rc, want a failure naming GO-2099-0001:"$'\n'"$out"

# The default database through a proxy that refuses connections (port 9 on
# loopback: nothing listens there), as on a machine without that access.
out=$(VULN_DIRS=deploy/image HTTPS_PROXY=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 ./deploy/vuln.sh 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "SKIPPED" <<<"$out" ||
	fail "with an unreachable database: exit $rc, want 0 and SKIPPED:"$'\n'"$out"
echo "vuln-selftest: ok (a finding fails, an unreachable database is skipped)"
