// Uploads COUNT generated files of SIZE bytes each with tus-js-client, in
// CHUNK-byte chunks, CONCURRENCY at a time, riding out gateways that die or
// drain behind a load balancer (each upload retries for about 40 s). File i is
// the pattern (j * 31 + (j >> 9)) & 255 with "upload-NNNNNNNN" (i, 8 digits)
// over its first 15 bytes, so the test can rebuild it. Prints one JSON line per
// upload, {"i", "ok", "key", "error", "retries"}, as each ends.
//
//   node tus_js_many.mjs ENDPOINT COUNT SIZE CHUNK CONCURRENCY
import * as tus from "tus-js-client";

const [endpoint, countArg, sizeArg, chunkArg, concurrencyArg] = process.argv.slice(2);
const count = Number(countArg);
const size = Number(sizeArg);
const pattern = Buffer.alloc(size);
for (let j = 0; j < size; j++) pattern[j] = (j * 31 + (j >> 9)) & 255;

function file(i) {
  const data = Buffer.from(pattern);
  data.write("upload-" + String(i).padStart(8, "0"), 0, "latin1");
  return data;
}

function upload(i) {
  return new Promise((resolve) => {
    let key = null;
    let retries = 0;
    const tusUpload = new tus.Upload(file(i), {
      endpoint,
      chunkSize: Number(chunkArg),
      retryDelays: [0, 500, 1000, 2000, 3000, 3000, 5000, 5000, 5000, 5000, 5000, 5000],
      metadata: { filename: "upload-" + i + ".bin", filetype: "application/octet-stream" },
      onShouldRetry() {
        retries += 1;
        return true;
      },
      onAfterResponse(_req, res) {
        const k = res.getHeader("X-Sluice-Key");
        if (k) key = k;
      },
      onError(error) {
        resolve({ i, ok: false, error: String(error), retries });
      },
      onSuccess() {
        resolve({ i, ok: true, key, retries });
      },
    });
    tusUpload.start();
  });
}

let next = 0;
async function worker() {
  while (next < count) {
    const i = next++;
    const result = await upload(i);
    process.stdout.write(JSON.stringify(result) + "\n");
  }
}
await Promise.all(Array.from({ length: Number(concurrencyArg) }, worker));
