#!/usr/bin/env bash
# A service on the demo fleet kept up between runs (`llmgw-tui demo up`):
# applied (two replicas behind a gateway), applied again (nothing changes),
# rolled to a longer context while a benchmark sends through the gateway for
# 40 s from another process (no request fails), scaled to one replica and
# stopped; then the demo fleet goes down and leaves no process behind.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
folder="$(mktemp -d)"
inventory="$(llmgw-tui demo up --dir "$folder/demo" | tail -n 1)"
trap 'llmgw-tui demo down --dir "$folder/demo"; rm -rf "$folder"' EXIT
run() { llmgw-tui --inventory "$inventory" --run - "$@"; }
cp "$here/demo-service.yaml" "$folder/chat.yaml"
service() {  # the document with one more setting changed: service KEY VALUE
  sed -i "s/^  $1: .*/  $1: $2/" "$folder/chat.yaml"
  echo "$folder/chat.yaml"
}

echo "steps: [{apply: {file: $here/demo-service.yaml}}]" | run
echo "steps: [{apply: {file: $here/demo-service.yaml}}]" | run   # nothing to change

echo 'steps: [{bench: {gateway: front, duration_s: 40, concurrency: 4}}]' \
  | run --json > "$folder/bench.json" &
bench=$!
sleep 5
echo "steps: [{apply: {file: $(service context 16384)}}]" | run   # two replaces, one at a time
wait "$bench"
grep -o '"failed": [0-9]*' "$folder/bench.json"                  # "failed": 0

echo "steps: [{apply: {file: $(service replicas 1)}}]" | run      # one stop
echo 'steps: [{stop: {service: chat}}, {stop: {gateway: front}}, {replicas: {}}]' | run
