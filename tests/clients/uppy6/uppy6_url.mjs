// Imports one file from a URL with the real @uppy/core + @uppy/url 6 (and
// @uppy/aws-s3 as the uploader, whose remote files go through Companion's
// /url/get) in headless Chromium, with a sluice gateway as the Companion:
// /url/meta, /url/get and the progress socket /api/TOKEN. The page is served
// at http://localhost:5173/ by request interception.
//
//   GATEWAY=http://127.0.0.1:PORT TOKEN=... node uppy6_url.mjs URL
//
// Prints one JSON line: {outcome, error, body, name, size, progressEvents,
// consoleErrors}.
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const parent = createRequire(`${here}/../package.json`);
const esbuild = parent("esbuild");
const { chromium } = parent("playwright-core");

const [remote] = process.argv.slice(2);
const gateway = process.env.GATEWAY;
const token = process.env.TOKEN || "";
const origin = "http://localhost:5173";

const bundle = await esbuild.build({
  stdin: {
    contents: `
      export { default as Uppy } from "@uppy/core";
      export { default as AwsS3 } from "@uppy/aws-s3";
      export { default as Url } from "@uppy/url";`,
    resolveDir: here,
  },
  bundle: true,
  format: "iife",
  globalName: "UppyBundle",
  write: false,
  logLevel: "error",
});

const page_html = `<!doctype html><meta charset="utf-8"><title>uppy 6 url</title>
<script src="/bundle.js"></script>
<script>
const { Uppy, AwsS3, Url } = UppyBundle;
const GATEWAY = ${JSON.stringify(gateway)};
const headers = { authorization: "Bearer " + ${JSON.stringify(token)} };
const uppy = new Uppy({ id: "url6", autoProceed: false })
  .use(Url, { companionUrl: GATEWAY, companionHeaders: headers })
  .use(AwsS3, { companionEndpoint: GATEWAY });
window.progressEvents = 0;
uppy.on("upload-progress", () => (window.progressEvents += 1));
window.run = async (url) => {
  try {
    await uppy.getPlugin("Url").addFile(url);
    const file = uppy.getFiles()[0];
    const result = await uppy.upload();
    const ok = result && result.successful && result.successful[0];
    const failed = result && result.failed && result.failed[0];
    return {
      outcome: ok ? "success" : "error",
      body: ok ? ok.response && ok.response.body : null,
      error: failed ? String(failed.error) : null,
      name: file && file.name,
      size: file && file.size,
      progressEvents: window.progressEvents,
    };
  } catch (error) {
    return { outcome: "error", error: String(error) };
  }
};
</script>`;

const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-features=LocalNetworkAccessChecks"],
});
const report = { consoleErrors: [] };
try {
  const context = await browser.newContext();
  await context.route(origin + "/**", (route) => {
    const url = new URL(route.request().url());
    if (url.pathname === "/bundle.js") {
      return route.fulfill({ contentType: "text/javascript", body: bundle.outputFiles[0].text });
    }
    return route.fulfill({ contentType: "text/html", body: page_html });
  });
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") report.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => report.consoleErrors.push(String(error)));
  await page.goto(origin + "/");
  Object.assign(report, await page.evaluate((u) => window.run(u), remote));
} catch (error) {
  report.outcome = "error";
  report.error = String(error);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
