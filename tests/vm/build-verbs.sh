#!/usr/bin/env bash
# Host: build the xfer-verbs integration test binary (tests/rc.rs) without
# running it and print its path, for tests/vm/verbs.sh / all.sh in the guest.
# Honors CARGO_TARGET_DIR. Build output goes to stderr; only the path to stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=$(cargo test -p xfer-verbs --test rc --no-run --message-format=json "$@" |
    grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//' | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "build-verbs: no test executable found" >&2
    exit 1
fi
echo "$bin"
