// Uploads a generated file with tus-js-client inside headless Chromium
// (playwright-core, the system's browser), the page on the gateway's own origin,
// printing the events tus_js_upload.mjs prints, one JSON line each:
// {"event":"url","url":...}, {"event":"progress","offset":N} after each chunk,
// then {"event":"success","url":...,"key":...,"sha256":...} or
// {"event":"error","message":...} (exit code 1). The file's bytes are
// (i * 7 + (i >> 11)) & 255; sha256 is theirs, computed here.
//
//   node tus_js_browser.mjs GATEWAY_URL SIZE CHUNK_BYTES
//
// TUS_PROTOCOL and TUS_RETRY_DELAYS as for tus_js_upload.mjs.
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const [gateway, sizeArg, chunkArg] = process.argv.slice(2);
const size = Number(sizeArg);
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const bytes = Buffer.alloc(size);
for (let i = 0; i < size; i++) bytes[i] = (i * 7 + (i >> 11)) & 255;
const sha256 = createHash("sha256").update(bytes).digest("hex");

const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
let code = 1;
try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => print({ event: "log", message: String(error) }));
  await page.goto(`${gateway}/healthz`);
  const require = createRequire(import.meta.url);
  await page.addScriptTag({ path: require.resolve("tus-js-client/dist/tus.js") });
  const ended = new Promise((resolve) => {
    page.exposeFunction("report", (event) => {
      if (event.event === "success") event.sha256 = sha256;
      print(event);
      if (event.event === "success" || event.event === "error") resolve(event.event);
    });
  });
  await page.evaluate(
    ({ size, chunk, protocol, retryDelays }) => {
      const data = new Uint8Array(size);
      for (let i = 0; i < size; i++) data[i] = (i * 7 + (i >> 11)) & 255;
      let key = null;
      const upload = new tus.Upload(new Blob([data]), {
        endpoint: "/v1/tus/",
        protocol,
        chunkSize: chunk,
        retryDelays,
        metadata: { filename: "browser.bin", filetype: "application/octet-stream" },
        onUploadUrlAvailable: () => window.report({ event: "url", url: upload.url }),
        onAfterResponse: (_req, res) => {
          const k = res.getHeader("X-Sluice-Key");
          if (k) key = k;
        },
        onChunkComplete: (_c, offset) => window.report({ event: "progress", offset }),
        onError: (error) => window.report({ event: "error", message: String(error) }),
        onSuccess: () => window.report({ event: "success", url: upload.url, key }),
      });
      upload.start();
    },
    {
      size,
      chunk: Number(chunkArg),
      protocol: process.env.TUS_PROTOCOL || "tus-v1",
      retryDelays: process.env.TUS_RETRY_DELAYS
        ? JSON.parse(process.env.TUS_RETRY_DELAYS)
        : [0, 250, 500, 1000, 1000, 2000, 2000, 3000, 3000, 5000, 5000, 5000],
    },
  );
  code = (await ended) === "success" ? 0 : 1;
} catch (error) {
  print({ event: "error", message: String(error) });
} finally {
  await browser.close();
}
process.exit(code);
