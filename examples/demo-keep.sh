#!/usr/bin/env bash
# keep on the demo fleet kept up between runs: the keeper starts the service
# (one replica behind a gateway); a benchmark at concurrency 32 through the
# gateway for 40 s makes requests wait, and the keeper scales out, naming the
# signal; once the load ends it scales back in to one. Then everything stops.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
folder="$(mktemp -d)"
inventory="$(llmgw-tui demo up --dir "$folder/demo" | tail -n 1)"
trap 'llmgw-tui demo down --dir "$folder/demo"; rm -rf "$folder"' EXIT
run() { llmgw-tui --inventory "$inventory" --run - "$@"; }

# The keeper, for 120 s, in the background: its events print as they happen.
echo "steps: [{keep: {file: $here/demo-keep.yaml, duration_s: 120}}]" | run &
keeper=$!
sleep 15                                                       # one replica, and the gateway
echo 'steps: [{bench: {gateway: front, duration_s: 40, concurrency: 32, max_tokens: 16}}]' | run
wait "$keeper"                                                 # back to one replica by now
echo 'steps: [{stop: {service: chat}}, {stop: {gateway: front}}]' | run
