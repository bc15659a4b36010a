// Uploads one generated file with the real @uppy/core + @uppy/aws-s3 6 (and
// @uppy/golden-retriever for the reload case) in headless Chromium, straight
// to the bucket, in one of aws-s3 6's three modes against a sluice gateway:
//
//   companion  companionEndpoint = GATEWAY + the path POST /s3/session answers
//   sign       signRequest posts each request to GATEWAY/s3/sign
//   sts        getCredentials from GATEWAY/s3/sts (kept in sessionStorage until
//              they expire, so a reloaded page resumes under the same prefix),
//              s3Endpoint and generateObjectKey from its answer
//
// Every call to the gateway carries `Authorization: Bearer TOKEN` (the
// companion mode's own requests cannot: its session path stands for it).
// The page is served at http://localhost:5173/ by request interception; the
// bundle is built here with esbuild from the pinned npm packages.
//
//   GATEWAY=http://127.0.0.1:PORT TOKEN=... BUCKET_ORIGIN=http://127.0.0.1:9000 \
//     node uppy6_direct.mjs MODE CASE SIZE
//
// CASE: upload (one upload; single request or multipart by size), reload (a
// multipart upload interrupted by reloading the page once 5 parts are in,
// then resumed), slow (an upload whose parts reach the bucket 800 ms apart;
// prints {"parts": N} lines as they land, for the caller to kill the gateway;
// a failed upload is retried as Uppy's retry button does, once a second).
// Prints one JSON line: {outcome, error, body, sha256, consoleErrors,
// partPuts, partPutsAfterReload, bucketRequests}.
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// playwright-core and esbuild are tests/clients' own.
const parent = createRequire(`${here}/../package.json`);
const esbuild = parent("esbuild");
const { chromium } = parent("playwright-core");

const [mode, kind, sizeText] = process.argv.slice(2);
const size = Number(sizeText);
const gateway = process.env.GATEWAY;
const token = process.env.TOKEN || "";
const bucketOrigin = process.env.BUCKET_ORIGIN;
const origin = "http://localhost:5173";

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

// The page: Uppy in MODE; window.run(size) adds a generated file and uploads
// it; after a reload, GoldenRetriever restores the file and window.resumed
// settles when the restored upload ends.
const page_html = `<!doctype html><meta charset="utf-8"><title>uppy 6 direct</title>
<script src="/bundle.js"></script>
<script>
const { Uppy, AwsS3, GoldenRetriever } = UppyBundle;
const MiB = 1024 * 1024;
const GATEWAY = ${JSON.stringify(gateway)};
const MODE = ${JSON.stringify(mode)};
const auth = { authorization: "Bearer " + ${JSON.stringify(token)} };
async function gatewayJson(path, init) {
  const response = await fetch(GATEWAY + path, init);
  const body = await response.json();
  if (!response.ok) throw new Error(path + ": " + response.status + " " + body.error + ": " + body.message);
  return body;
}
async function temporaryCredentials() {
  const kept = JSON.parse(sessionStorage.getItem("sluice-sts") || "null");
  if (kept && Date.parse(kept.credentials.Expiration) > Date.now() + 60000) return kept;
  const fresh = await gatewayJson("/s3/sts", { headers: auth });
  sessionStorage.setItem("sluice-sts", JSON.stringify(fresh));
  return fresh;
}
async function modeOptions() {
  if (MODE === "companion") {
    const session = await gatewayJson("/s3/session", { method: "POST", headers: auth });
    return { companionEndpoint: GATEWAY + session.path };
  }
  if (MODE === "sign") {
    return {
      signRequest: (request) => gatewayJson("/s3/sign", {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify(request),
      }),
    };
  }
  if (MODE === "sts") {
    const sts = await temporaryCredentials();
    return {
      s3Endpoint: sts.endpoint,
      generateObjectKey: (file) => sts.prefix + file.name,
      getCredentials: async () => {
        const { credentials, region } = await temporaryCredentials();
        return {
          credentials: {
            accessKeyId: credentials.AccessKeyId,
            secretAccessKey: credentials.SecretAccessKey,
            sessionToken: credentials.SessionToken,
            expiration: credentials.Expiration,
          },
          region,
        };
      },
    };
  }
  throw new Error("unknown mode " + MODE);
}
window.progress = 0;
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
window.ready = (async () => {
  const uppy = new Uppy({ id: "direct6", autoProceed: false })
    .use(AwsS3, { ...(await modeOptions()), shouldUseMultipart: (file) => file.size > 5 * MiB, limit: 4 })
    .use(GoldenRetriever, { indexedDB: { maxFileSize: 256 * MiB, maxTotalSize: 512 * MiB } });
  uppy.on("upload-progress", (file, p) => {
    if (p.bytesTotal) window.progress = p.bytesUploaded / p.bytesTotal;
  });
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
      let result = await uppy.upload();
      // As a user would with Uppy's retry button: once the gateway is back,
      // the failed upload goes on from the parts it has (a few tries, 1 s apart).
      let retries = 0;
      while (window.retryFailed && result && result.failed && result.failed.length && retries < 10) {
        retries += 1;
        await new Promise((r) => setTimeout(r, 1000));
        result = await uppy.retryAll();
      }
      return { ...outcome(result), sha256: sha, retries };
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
})();
</script>`;

const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  // The page's origin is intercepted, not served: Chromium's Local Network
  // Access check would count it as public and refuse its requests to loopback.
  args: ["--no-sandbox", "--disable-features=LocalNetworkAccessChecks"],
});
const report = { consoleErrors: [], partPuts: 0, partPutsAfterReload: 0, bucketRequests: 0 };
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
  // Before a reload (and all along in the slow case), parts reach the bucket
  // 800 ms apart, so the reload or a kill finds the upload half done.
  let partsDone = 0;
  if (kind === "reload" || kind === "slow") {
    await context.route(bucketOrigin + "/**", async (route) => {
      if (!reloaded && route.request().method() === "PUT") {
        await new Promise((resolve) => setTimeout(resolve, 800));
      }
      return route.continue();
    });
  }
  const page = await context.newPage();
  page.on("response", (response) => {
    if (response.url().startsWith(bucketOrigin) && response.request().method() === "PUT" && response.ok()) {
      partsDone += 1;
      if (kind === "slow") process.stdout.write(JSON.stringify({ parts: partsDone }) + "\n");
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
    if (request.url().startsWith(bucketOrigin)) {
      report.bucketRequests += 1;
      if (request.method() === "PUT") {
        if (reloaded) report.partPutsAfterReload += 1;
        else report.partPuts += 1;
      }
    }
  });
  await page.goto(origin + "/");
  await page.evaluate(() => window.ready);
  await page.evaluate((retry) => (window.retryFailed = retry), kind === "slow");
  if (kind === "upload" || kind === "slow") {
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
    page.evaluate((n) => window.run(n), size).catch(() => {});
    const deadline = Date.now() + 120000;
    while (partsDone < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await page.waitForTimeout(700);
    reloaded = true;
    await page.reload();
    await page.evaluate(() => window.ready);
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
