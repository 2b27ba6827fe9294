#!/usr/bin/env bash
# vuln: govulncheck over deed's module and the image module. govulncheck
# is installed on first use (a pinned version, into CACHE). It needs the Go
# vulnerability database: when this machine cannot reach it, the step says
# so and is skipped (exit 0), which is distinct from vulnerabilities found
# (exit 3, reported as a failure) and from any other error (exit 1).
# VULNDB=URL points it at another copy of the database (-db, e.g. file:///srv/vulndb);
# VULN_DIRS limits the modules checked (deploy/vuln-selftest.sh uses both).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VERSION=v1.9.0
CACHE=${CACHE:-$HOME/.cache/deed-bin}
bin="$CACHE/govulncheck"

if ! "$GO" version -m "$bin" 2>/dev/null | grep -qE "golang.org/x/vuln[[:space:]]+$VERSION([[:space:]]|\$)"; then
	echo "installing govulncheck $VERSION into $CACHE"
	mkdir -p "$CACHE"
	GOBIN="$CACHE" "$GO" install "golang.org/x/vuln/cmd/govulncheck@$VERSION"
fi

db=()
[ -n "${VULNDB:-}" ] && db=(-db "$VULNDB")

# unreachable: the output says the database could not be fetched.
unreachable() {
	grep -qiE 'fetching vulnerabilities|dial tcp|no such host|connection refused|i/o timeout|TLS handshake|network is unreachable|proxyconnect|Client\.Timeout' <<<"$1"
}

status=0
for dir in ${VULN_DIRS:-. deploy/image}; do
	echo "govulncheck $dir"
	set +e
	out=$(cd "$dir" && "$bin" "${db[@]}" ./... 2>&1)
	rc=$?
	set -e
	case $rc in
	0) echo "$out" | tail -n 3 ;;
	3)
		echo "$out"
		echo "vuln: govulncheck found vulnerabilities in $dir (see above)" >&2
		status=1
		;;
	*)
		if unreachable "$out"; then
			echo "$out" | tail -n 3
			echo "vuln: SKIPPED: the vulnerability database cannot be reached from this machine (set VULNDB=file:///path to use a local copy)"
			exit 0
		fi
		echo "$out"
		echo "vuln: govulncheck failed in $dir (exit $rc)" >&2
		exit 1
		;;
	esac
done
exit $status
