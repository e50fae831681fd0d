#!/usr/bin/env bash
# Installs uWebSockets.js for bench/compare --peers uws: npm package uws-pack 20.0.8 (a
# re-packaging of uWebSockets.js v20's own release binaries, built on Ubuntu 20.04, glibc ≥ 2.27;
# the uWebSockets.js releases on npm today need glibc 2.38), pinned by package-lock.json, into
# bench/peers/uws/node_modules (git-ignored; kept between runs). With CORECAST_UWS_CACHE set (a
# folder outside the checkout, kept between CI runs: the package is a 48 MB download), it is
# installed there and node_modules is a link to it. Checks that the binary loads in this node,
# then prints the node binary and the server script, one per line.
# Needs node ≥ 18 (ABI 108/115/120/127 binaries; its package.json asks for ≥ 22, which npm
# only warns about: the node-20 binary is in the package and loads).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION=20.0.8
NODE="$(command -v node)" || { echo "uws setup: node is not installed" >&2; exit 1; }
version_in() { [ -d "$1" ] || return 0; (cd "$1" && "$NODE" -p "try { require('./node_modules/uws-pack/package.json').version } catch { '' }"); }
if [ "$(version_in "$DIR")" != "$VERSION" ]; then
  INTO="${CORECAST_UWS_CACHE:-$DIR}"
  if [ "$INTO" = "$DIR" ] || [ "$(version_in "$INTO")" != "$VERSION" ]; then
    echo "uws setup: npm ci uws-pack@$VERSION into $INTO/node_modules" >&2
    mkdir -p "$INTO"
    [ "$INTO" = "$DIR" ] || cp "$DIR/package.json" "$DIR/package-lock.json" "$INTO/"
    (cd "$INTO" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
  if [ "$INTO" != "$DIR" ]; then
    rm -rf "$DIR/node_modules"
    ln -s "$INTO/node_modules" "$DIR/node_modules"
  fi
fi
# the binary for this node's ABI must load (a glibc too old fails here, naming the symbol)
(cd "$DIR" && "$NODE" --input-type=module -e \
  "import { App } from 'uws-pack'; App(); console.error('uws setup: uws-pack $VERSION loads in node ' + process.version)")
echo "$NODE"
echo "$DIR/server.js"
