#!/usr/bin/env bash
# Rebuilds the Uppy bundle the gateway's upload page embeds
# (crates/sluice-server/assets/uppy.js and uppy.css) from the exact npm versions
# pinned in ui/package.json and ui/package-lock.json, with esbuild, and records
# every bundled package's version and license in assets/UPPY-BUNDLE.md. Run it
# after changing ui/; commit its three outputs (the gateway has no internet and
# fetches nothing from a CDN).
set -euo pipefail
cd "$(dirname "$0")/../ui"
npm ci --no-audit --no-fund --loglevel=error
out=../crates/sluice-server/assets
npx esbuild entry.js --bundle --minify --format=iife --global-name=SluiceUppy \
  --target=es2020 --legal-comments=none --metafile=meta.json --outfile="$out/uppy.js" --log-level=warning
npx esbuild entry.css --bundle --minify --outfile="$out/uppy.css" --log-level=warning
node --input-type=module - "$out/UPPY-BUNDLE.md" <<'JS'
import { readFileSync, writeFileSync } from "node:fs";
const meta = JSON.parse(readFileSync("meta.json", "utf8"));
const packages = new Map();
for (const input of Object.keys(meta.inputs)) {
  const match = input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//g);
  if (!match) continue;
  const dir = match.join("").replace(/\/$/, "");
  const pkg = JSON.parse(readFileSync(dir + "/package.json", "utf8"));
  packages.set(pkg.name, `| ${pkg.name} | ${pkg.version} | ${pkg.license || "see package"} |`);
}
const lines = [
  "# The upload page's Uppy bundle",
  "",
  "`uppy.js` and `uppy.css` are built by `scripts/build-ui.sh` from `ui/package.json`",
  "(versions pinned, `ui/package-lock.json`) with esbuild; do not edit them by hand.",
  "These packages are in the bundle:",
  "",
  "| package | version | license |",
  "| --- | --- | --- |",
  ...[...packages.keys()].sort().map((name) => packages.get(name)),
  "",
];
writeFileSync(process.argv[2], lines.join("\n"));
JS
rm -f meta.json
ls -l "$out"/uppy.js "$out"/uppy.css
