// Drives the gateway's own pages in headless Chromium (playwright-core, the
// system's browser) and prints one JSON line.
//
//   node ui_check.mjs upload PAGE_URL SIZE SCREENSHOT
//     Drops a generated file of SIZE bytes on the upload page's Uppy Dashboard,
//     presses Upload and waits for the "Stored" row:
//     {errors, sha256, name, key, bytes, checksum}
//   node ui_check.mjs dashboard PAGE_URL SECONDS SCREENSHOT
//     Watches the dashboard for SECONDS while the caller makes load, and reads
//     each chart and value at the start and at the end:
//     {errors, charts: [{label, before, after, value}]}
//
// SLUICE_TEST_CHROMIUM_ARGS adds command-line flags to the browser (split on
// spaces), such as the certificate a test CA issued to trust.
import { createHash } from "node:crypto";
import { chromium } from "playwright-core";

const [kind, url, amount, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", ...(process.env.SLUICE_TEST_CHROMIUM_ARGS || "").split(" ").filter(Boolean)],
});
const report = { errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.on("console", (message) => {
    if (message.type() === "error") report.errors.push(message.text());
  });
  page.on("pageerror", (error) => report.errors.push(String(error)));
  await page.goto(url);
  if (kind === "upload") {
    const size = Number(amount);
    const buffer = Buffer.alloc(size);
    for (let i = 0; i < size; i++) buffer[i] = (i * 7 + (i >> 11)) & 255;
    report.sha256 = createHash("sha256").update(buffer).digest("hex");
    report.name = "report-" + size + ".bin";
    await page.setInputFiles(".uppy-Dashboard-input", {
      name: report.name,
      mimeType: "application/octet-stream",
      buffer,
    });
    await page.click(".uppy-StatusBar-actionBtn--upload");
    const row = await page.waitForSelector('#done tbody tr[data-done="1"]', { timeout: 60000 });
    const cells = await row.$$eval("td", (tds) => tds.map((td) => td.textContent));
    [, report.key, report.bytes, report.checksum] = cells;
    await page.screenshot({ path: screenshot });
  } else if (kind === "dashboard") {
    const read = () =>
      page.$$eval(".card", (cards) =>
        cards.map((card) => ({
          label: card.querySelector(".label").textContent,
          value: card.querySelector(".value").textContent,
          path: card.querySelector("path.line").getAttribute("d") || "",
        })),
      );
    await page.waitForTimeout(2500);
    const before = await read();
    await page.waitForTimeout(Number(amount) * 1000);
    const after = await read();
    report.charts = after.map((card, i) => ({
      label: card.label,
      value: card.value,
      before: before[i].path,
      after: card.path,
    }));
    await page.screenshot({ path: screenshot });
  } else {
    throw new Error("unknown check " + kind);
  }
} catch (error) {
  report.errors.push(String(error));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
