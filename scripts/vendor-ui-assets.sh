#!/usr/bin/env bash
# Vendors Swagger UI into crates/vfps-server/assets/vendor/swagger-ui-dist/,
# which the binary serves under /swagger/ (compiled in: no CDN, no build step).
# The package comes from npm, pinned by version and by the tarball's sha512
# integrity (as the registry states it); only the files the page loads, the
# package's licence and notice, the licences of the code bundled into
# swagger-ui-bundle.js, a README naming version and source, and the copied
# files' SHA256SUMS are kept, unmodified.
# To update: change both pins (`npm view swagger-ui-dist@<version> dist.integrity`),
# run this script, check /swagger in a browser, commit the folder.
set -euo pipefail
cd "$(dirname "$0")/.."

version=5.35.0
integrity=sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==
dest=crates/vfps-server/assets/vendor/swagger-ui-dist
files=(swagger-ui-bundle.js swagger-ui.css LICENSE NOTICE swagger-ui-bundle.js.LICENSE.txt)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm pack --silent --ignore-scripts --pack-destination "$tmp" "swagger-ui-dist@$version" >/dev/null
tarball="$tmp/swagger-ui-dist-$version.tgz"
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$actual" != "$integrity" ]; then
  echo "vendor-ui-assets: swagger-ui-dist $version's tarball has integrity $actual, not the pinned $integrity" >&2
  exit 1
fi
tar xzf "$tarball" -C "$tmp"
packed=$(sed -n 's/^ *"version": "\(.*\)",$/\1/p' "$tmp/package/package.json")
[ "$packed" = "$version" ] || { echo "vendor-ui-assets: the tarball holds version $packed, not $version" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest"
for f in "${files[@]}"; do
  cp "$tmp/package/$f" "$dest/$f"
done
(cd "$dest" && sha256sum "${files[@]}" >SHA256SUMS)
cat >"$dest/README.md" <<EOF
# swagger-ui-dist $version

From npm: \`swagger-ui-dist@$version\`
(https://registry.npmjs.org/swagger-ui-dist/-/swagger-ui-dist-$version.tgz,
integrity \`$integrity\`), the files unmodified; Swagger UI is
https://github.com/swagger-api/swagger-ui, Apache License 2.0 (LICENSE, NOTICE;
the licences of the code bundled into swagger-ui-bundle.js are in
swagger-ui-bundle.js.LICENSE.txt). SHA256SUMS lists the copied files.

Written by scripts/vendor-ui-assets.sh; change the pins there and run it
again rather than editing this folder.
EOF
echo "vendor-ui-assets: swagger-ui-dist $version in $dest"
