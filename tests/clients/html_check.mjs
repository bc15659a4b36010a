// Opens a sluice bench HTML report in headless Chromium (playwright-core, the
// system's browser), collects console errors and page errors, measures the charts
// and saves a screenshot; prints {"errors":[...],"charts":[{"marks":N,"width":W}]}.
//
//   node html_check.mjs REPORT.html SCREENSHOT.png
import { resolve } from "node:path";
import { chromium } from "playwright-core";

const [report, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.SLUICE_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto("file://" + resolve(report));
  const charts = await page.$$eval("svg.chart", (svgs) =>
    svgs.map((svg) => ({
      marks: svg.querySelectorAll("path, rect").length,
      width: svg.getBoundingClientRect().width,
    })),
  );
  await page.screenshot({ path: screenshot, fullPage: true });
  process.stdout.write(JSON.stringify({ errors, charts }) + "\n");
} finally {
  await browser.close();
}
