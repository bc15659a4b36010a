// Uploads one generated file with the real @uppy/core + @uppy/aws-s3 (and
// @uppy/golden-retriever for the reload case) in headless Chromium, straight to
// the bucket, signed by a sluice gateway's /s3/ routes. The page is served at
// http://localhost:5173/ by request interception (a secure context, so
// crypto.subtle works; nothing listens there); the Uppy bundle is built here
// with esbuild from the pinned npm packages.
//
//   GATEWAY=http://127.0.0.1:PORT TOKEN=... BUCKET_ORIGIN=http://127.0.0.1:9000 \
//     node uppy_direct.mjs CASE SIZE
//
// CASE: upload (one upload; single request or multipart by size), reload (a
// multipart upload interrupted by reloading the page once 5 parts are in, then
// resumed).
// Prints one JSON line: {outcome, error, body, sha256, consoleErrors,
// partPuts, partPutsAfterReload, listParts, bucketRequests}.
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";

const [kind, sizeText] = process.argv.slice(2);
const size = Number(sizeText);
const gateway = process.env.GATEWAY;
const token = process.env.TOKEN || "";
const bucketOrigin = process.env.BUCKET_ORIGIN;
const origin = "http://localhost:5173";
const here = dirname(fileURLToPath(import.meta.url));

const bundle = await esbuild.build({
  stdin: {
    contents: `
      export { default as Uppy } from "@uppy/core";
      export { default as AwsS3 } from "@uppy/aws-s3";
      export { default as GoldenRetriever } from "@uppy/golden-retriever";`,
    resolveDir: here,
  },
  bundle: true,
  format: "iife",
  globalName: "UppyBundle",
  write: false,
  logLevel: "error",
});

// The page: Uppy with the gateway as its Companion; window.run(size) adds a
// generated file and uploads it; after a reload, GoldenRetriever restores the
// file and window.resumed settles when the restored upload ends.
const page_html = `<!doctype html><meta charset="utf-8"><title>uppy direct</title>
<script src="/bundle.js"></script>
<script>
const { Uppy, AwsS3, GoldenRetriever } = UppyBundle;
const MiB = 1024 * 1024;
const uppy = new Uppy({ id: "direct", autoProceed: false })
  .use(AwsS3, {
    endpoint: ${JSON.stringify(gateway)},
    headers: { authorization: "Bearer " + ${JSON.stringify(token)} },
    shouldUseMultipart: (file) => file.size > 5 * MiB,
    limit: 4,
  })
  .use(GoldenRetriever, { indexedDB: { maxFileSize: 256 * MiB, maxTotalSize: 512 * MiB } });
window.progress = 0;
uppy.on("upload-progress", (file, p) => {
  if (p.bytesTotal) window.progress = p.bytesUploaded / p.bytesTotal;
});
async function sha256(blob) {
  const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
function outcome(result) {
  const ok = result && result.successful && result.successful[0];
  const failed = result && result.failed && result.failed[0];
  return {
    outcome: ok ? "success" : "error",
    body: ok ? ok.response && ok.response.body : null,
    error: failed ? String(failed.error) : null,
  };
}
window.run = async (size) => {
  const bytes = new Uint8Array(size);
  let x = 2463534242;
  for (let i = 0; i < size; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
    bytes[i] = x & 255;
  }
  const blob = new Blob([bytes], { type: "application/octet-stream" });
  uppy.addFile({ name: "file-" + size + ".bin", type: "application/octet-stream", data: blob });
  const sha = await sha256(blob);
  try {
    return { ...outcome(await uppy.upload()), sha256: sha };
  } catch (error) {
    return { outcome: "error", error: String(error), sha256: sha };
  }
};
window.resumed = new Promise((resolve) => {
  uppy.on("restored", async () => {
    const uploads = Object.keys(uppy.getState().currentUploads);
    const file = uppy.getFiles()[0];
    const sha = file && file.data && file.data.size ? await sha256(file.data) : null;
    try {
      const result = await uppy.restore(uploads[0]);
      resolve({ ...outcome(result), sha256: sha, restoredUploads: uploads.length });
    } catch (error) {
      resolve({ outcome: "error", error: String(error), sha256: sha });
    }
  });
});
</script>`;

const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  // The page's origin is intercepted, not served: Chromium's Local Network
  // Access check would count it as public and refuse its requests to loopback.
  args: ["--no-sandbox", "--disable-features=LocalNetworkAccessChecks"],
});
const report = { consoleErrors: [], partPuts: 0, partPutsAfterReload: 0, listParts: 0, bucketRequests: 0 };
let reloaded = false;
try {
  const context = await browser.newContext();
  await context.route(origin + "/**", (route) => {
    const url = new URL(route.request().url());
    if (url.pathname === "/bundle.js") {
      return route.fulfill({ contentType: "text/javascript", body: bundle.outputFiles[0].text });
    }
    return route.fulfill({ contentType: "text/html", body: page_html });
  });
  // Before the reload, parts reach the bucket slowly (800 ms each), so the
  // reload finds the upload half done.
  let partsDone = 0;
  if (kind === "reload") {
    await context.route(bucketOrigin + "/**", async (route) => {
      if (!reloaded && route.request().method() === "PUT") {
        await new Promise((resolve) => setTimeout(resolve, 800));
      }
      return route.continue();
    });
  }
  const page = await context.newPage();
  page.on("response", (response) => {
    if (response.url().startsWith(bucketOrigin) && response.request().method() === "PUT") {
      partsDone += 1;
    }
  });
  page.on("console", (message) => {
    if (message.type() === "error") report.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => report.consoleErrors.push(String(error)));
  let inFlight = 0;
  page.on("requestfinished", () => (inFlight -= 1));
  page.on("requestfailed", () => (inFlight -= 1));
  page.on("request", (request) => {
    inFlight += 1;
    const url = request.url();
    if (url.startsWith(bucketOrigin)) {
      report.bucketRequests += 1;
      if (request.method() === "PUT") {
        if (reloaded) report.partPutsAfterReload += 1;
        else report.partPuts += 1;
      }
    }
    if (url.startsWith(gateway + "/s3/multipart/") && request.method() === "GET" && !/\/\d+\?key=/.test(url)) {
      report.listParts += 1;
    }
  });
  await page.goto(origin + "/");
  if (kind === "upload") {
    Object.assign(report, await page.evaluate((n) => window.run(n), size));
    // A refused upload is aborted by Uppy after it reports the error: let that
    // request finish before the browser closes (no request open for 500 ms).
    const until = Date.now() + 5000;
    let quietSince = Date.now();
    while (Date.now() < until && Date.now() - quietSince < 500) {
      if (inFlight > 0) quietSince = Date.now();
      await new Promise((r) => setTimeout(r, 50));
    }
  } else if (kind === "reload") {
    // Start, and reload once 5 parts are in (GoldenRetriever saves its state as it goes).
    page.evaluate((n) => window.run(n), size).catch(() => {});
    const deadline = Date.now() + 120000;
    while (partsDone < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await page.waitForTimeout(700);
    reloaded = true;
    await page.reload();
    Object.assign(report, await page.evaluate(() => window.resumed));
  } else {
    throw new Error("unknown case " + kind);
  }
} catch (error) {
  report.outcome = "error";
  report.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
