#!/usr/bin/env bash
# Makes docs/report.png, the README's picture of the compile report: compiles GPT-2 tiny for
# mcm-2x2 (the README's walkthrough) and has headless Chromium draw the top of report.html.
# Usage: scripts/report-screenshot.sh [TESSERA_BINARY]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tessera=${1:-target/debug/tessera}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tessera" compile testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 \
    --target mcm-2x2 -o "$out/gpt2-mcm" >/dev/null
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1250 \
    --screenshot="$out/report.png" "file://$out/gpt2-mcm/report.html" 2>/dev/null
mkdir -p docs
mv "$out/report.png" docs/report.png
echo "wrote docs/report.png"
