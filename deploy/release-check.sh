#!/usr/bin/env bash
# release-check: build a release into a temporary directory and verify it:
# exactly the expected artifacts, SHA256SUMS lists each of them and matches,
# every binary is static (CGO_ENABLED=0), built with -trimpath for its
# platform with the version linked in and with no build tags (deedbroken's
# switches must never ship), and the host's binary prints that
# version for both `deed version` and `deed --version`.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
version=v0.0.0-releasecheck
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT

make --no-print-directory release VERSION="$version" DIST="$dist" >/dev/null
rel=$dist/release
fail() { echo "release-check: $*" >&2; exit 1; }

want="SHA256SUMS
deed-$version-darwin-arm64
deed-$version-linux-amd64
deed-$version-linux-arm64
deed-$version-windows-amd64.exe"
got=$(cd "$rel" && ls -1 | LC_ALL=C sort)
[ "$got" = "$want" ] || fail "artifacts differ:"$'\n'"got:"$'\n'"$got"$'\n'"want:"$'\n'"$want"

listed=$(awk '{print $2}' "$rel/SHA256SUMS" | LC_ALL=C sort)
[ "$listed" = "$(grep -v SHA256SUMS <<<"$want")" ] || fail "SHA256SUMS lists: $listed"
(cd "$rel" && sha256sum --quiet -c SHA256SUMS) || fail "checksums do not match"

for f in "$rel"/deed-*; do
	name=$(basename "$f" .exe)
	plat=${name#deed-"$version"-}
	info=$("$GO" version -m "$f")
	grep -q $'\tbuild\tCGO_ENABLED=0$' <<<"$info" || fail "$name: not CGO_ENABLED=0"
	grep -q $'\tbuild\t-trimpath=true$' <<<"$info" || fail "$name: not -trimpath"
	grep -q $'\tbuild\tGOOS='"${plat%-*}"'$' <<<"$info" || fail "$name: wrong GOOS"
	grep -q $'\tbuild\tGOARCH='"${plat#*-}"'$' <<<"$info" || fail "$name: wrong GOARCH"
	# A build tag changes what is compiled in: deedbroken's switches break
	# the protocol on purpose. A release is built with none (even one that
	# came in through GOFLAGS).
	if grep -q $'\tbuild\t-tags=' <<<"$info"; then fail "$name: built with build tags ($(grep $'\tbuild\t-tags=' <<<"$info" | cut -f3)): a release has none"; fi
	grep -qaF -- "$version" "$f" || fail "$name: version not linked in"
done

host="$rel/deed-$version-$("$GO" env GOOS)-$("$GO" env GOARCH)"
if [ -x "$host" ]; then
	out=$("$host" version)
	[[ $out == "deed $version ("* ]] || fail "deed version printed: $out"
	[ "$("$host" --version)" = "$out" ] || fail "deed --version differs from deed version"
fi
echo "release-check: ok ($(grep -vc SHA256SUMS <<<"$want") binaries, checksums verified)"
