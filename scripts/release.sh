#!/usr/bin/env bash
# Builds nqd's release artifacts into dist/ (nothing is published):
#   nqd_<version>_<os>_<arch>.tar.gz  a static nqd for linux and darwin on amd64
#                                     and arm64, with LICENSE and README.md
#   nqd-worker-<version>.tgz          the TypeScript SDK (npm pack)
#   nqd-nuxt-<version>.tgz            the Nuxt module (npm pack)
#   nqd-worker-<version>.tar.gz, nqd_worker-<version>-py3-none-any.whl
#                                     the Python SDK's sdist and wheel
#                                     (Debian's python3-build)
#   nqd_<version>_image.tar.gz        the container image (docker save), only
#                                     when a Docker engine answers
#   SHA256SUMS                        the checksums of all of the above
#
# The version is VERSION when set (make release passes the Makefile's), else
# git describe of the tags v*; a tag v1.2.3 gives 1.2.3 in the file names and
# v1.2.3 in nqd -version.
#
# With --check it builds only the binary of this machine's platform, runs its
# -version and leaves dist/ alone: a quick proof that the release build works.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}
VERSION=${VERSION:-$(git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)}
# File names carry the version without the tag's leading v.
file_version=${VERSION#v}
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)

# build_nqd OS ARCH OUT builds a static nqd with the flags of make build.
build_nqd() {
  CGO_ENABLED=0 GOOS=$1 GOARCH=$2 "$GO" build -trimpath \
    -ldflags "-s -w -X main.version=$VERSION" -o "$3" ./cmd/server
}

# check_version BINARY fails unless BINARY's -version names VERSION: the
# ldflags set a variable by name, and a renamed one would go unnoticed.
check_version() {
  local got
  got=$("$1" -version)
  if [ "$got" != "nqd $VERSION" ]; then
    echo "release: nqd -version printed \"$got\", want \"nqd $VERSION\"" >&2
    exit 1
  fi
  echo "release: $got"
}
host=$("$GO" env GOOS)/$("$GO" env GOARCH)

if [ "${1:-}" = --check ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  build_nqd "${host%/*}" "${host#*/}" "$tmp/nqd"
  check_version "$tmp/nqd"
  exit 0
fi

# A release tag must name the version that CHANGELOG.md and the SDKs'
# metadata carry (a Go test holds those equal on every push).
if [[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  newest=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -1)
  if [ "$file_version" != "$newest" ]; then
    echo "release: the tag $VERSION is not the newest version in CHANGELOG.md ($newest)" >&2
    exit 1
  fi
fi

dist=$PWD/dist
rm -rf "$dist"
mkdir -p "$dist"

# Tarballs with fixed owners, order and times, so that the same commit gives
# the same bytes.
mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
for platform in "${platforms[@]}"; do
  os=${platform%/*} arch=${platform#*/}
  name=nqd_${file_version}_${os}_${arch}
  echo "release: $name.tar.gz"
  stage=$(mktemp -d)
  build_nqd "$os" "$arch" "$stage/nqd"
  if [ "$platform" = "$host" ]; then check_version "$stage/nqd"; fi
  cp LICENSE README.md "$stage/"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
    -czf "$dist/$name.tar.gz" nqd LICENSE README.md
  rm -rf "$stage"
done

if docker info >/dev/null 2>&1; then
  echo "release: container image nqd:$file_version"
  docker build --build-arg VERSION="$VERSION" -t "nqd:$file_version" .
  docker save "nqd:$file_version" | gzip >"$dist/nqd_${file_version}_image.tar.gz"
else
  echo "release: no Docker engine (docker info failed): the container image is skipped"
fi

echo "release: npm package of sdk/typescript"
(cd sdk/typescript && npm ci --no-audit --no-fund && npm run build && npm pack --pack-destination "$dist")

echo "release: npm package of sdk/nuxt"
(cd sdk/nuxt && npm ci --no-audit --no-fund && npm run build && npm pack --pack-destination "$dist")

echo "release: Python package of sdk/python"
# setuptools builds in the source tree; a build/ left by an earlier run could
# carry files that no longer exist.
rm -rf sdk/python/build sdk/python/*.egg-info
"$PYTHON" -m build --no-isolation --outdir "$dist" sdk/python
rm -rf sdk/python/build sdk/python/*.egg-info

(cd "$dist" && sha256sum -- * >SHA256SUMS)
echo "release: dist/"
ls -l "$dist"
