#!/usr/bin/env bash
# Installs uWebSockets.js for bench/compare --peers uws: npm package uws-pack 20.0.8 (a
# re-packaging of uWebSockets.js v20's own release binaries, built on Ubuntu 20.04, glibc ≥ 2.27;
# the uWebSockets.js releases on npm today need glibc 2.38), pinned by package-lock.json, into
# bench/peers/uws/node_modules (git-ignored; kept between runs). Checks that the binary loads in
# this node, then prints the node binary and the server script, one per line.
# Needs node ≥ 18 (ABI 108/115/120/127 binaries; its package.json asks for ≥ 22, which npm
# only warns about: the node-20 binary is in the package and loads).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION=20.0.8
NODE="$(command -v node)" || { echo "uws setup: node is not installed" >&2; exit 1; }
have="$(cd "$DIR" && "$NODE" -p "try { require('./node_modules/uws-pack/package.json').version } catch { '' }")"
if [ "$have" != "$VERSION" ]; then
  echo "uws setup: npm ci uws-pack@$VERSION into $DIR/node_modules" >&2
  (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
# the binary for this node's ABI must load (a glibc too old fails here, naming the symbol)
(cd "$DIR" && "$NODE" --input-type=module -e \
  "import { App } from 'uws-pack'; App(); console.error('uws setup: uws-pack $VERSION loads in node ' + process.version)")
echo "$NODE"
echo "$DIR/server.js"
