// Uploads one file to a tus endpoint with tus-js-client, printing one JSON line per
// event: {"event":"url","url":...} once the upload exists, {"event":"progress",
// "offset":N} after each chunk, then {"event":"success","url":...,"key":...} or
// {"event":"error","message":...} (exit code 1).
//
//   node tus_js_upload.mjs ENDPOINT FILE CHUNK_BYTES|unbounded
//
// TUS_RETRY_DELAYS (a JSON array of milliseconds) replaces the retry delays, such
// as Uppy's defaults [0, 1000, 3000, 5000]; TUS_HEADERS (a JSON object) adds
// headers to every request, such as {"Authorization": "Bearer ..."}; TUS_PROTOCOL
// picks tus-js-client's protocol: tus-v1 (the default), ietf-draft-03 (the IETF
// resumable-upload draft, interop 5) or ietf-draft-05 (interop 6).
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import * as tus from "tus-js-client";

const [endpoint, path, chunkArg] = process.argv.slice(2);
const data = readFileSync(path);
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");
let key = null;

const upload = new tus.Upload(data, {
  endpoint,
  protocol: process.env.TUS_PROTOCOL || "tus-v1",
  chunkSize: chunkArg === "unbounded" ? Infinity : Number(chunkArg),
  // Retries ride out a gateway restart: about 30 s in all, unless told otherwise.
  retryDelays: process.env.TUS_RETRY_DELAYS
    ? JSON.parse(process.env.TUS_RETRY_DELAYS)
    : [0, 250, 500, 1000, 1000, 2000, 2000, 3000, 3000, 5000, 5000, 5000],
  headers: process.env.TUS_HEADERS ? JSON.parse(process.env.TUS_HEADERS) : {},
  metadata: { filename: basename(path), filetype: "application/octet-stream" },
  removeFingerprintOnSuccess: true,
  onUploadUrlAvailable() {
    print({ event: "url", url: upload.url });
  },
  onAfterResponse(_req, res) {
    const k = res.getHeader("X-Sluice-Key");
    if (k) key = k;
  },
  onChunkComplete(_chunk, offset) {
    print({ event: "progress", offset });
  },
  onError(error) {
    print({ event: "error", message: String(error) });
    process.exit(1);
  },
  onSuccess() {
    print({ event: "success", url: upload.url, key });
  },
});
upload.start();
