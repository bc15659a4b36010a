// A client of the IETF resumable-upload draft written for the wire checks: it
// drives one server through every step the draft names, with Node's
// http.request (no library between it and the bytes), and prints one JSON
// line per step: {step, status, headers: {name: value} (the draft's and a
// few others), body (problem documents and JSON, when short)}.
//
//   node draft_wire.mjs ORIGIN CREATION_PATH INTEROP_VERSION [MAX_SIZE]
//
// Steps: options; careful creation (Upload-Complete: ?0, Upload-Length);
// offset; append; cut (an append whose connection is cut halfway) and the
// offset after it; stale (an append at an old offset: the 409); last (the
// completing append); offset of the completed upload; after-complete (an
// append to it); optimistic creation with the whole body and a Repr-Digest,
// and with a wrong one; cancel and the offset after; too-large (an
// Upload-Length past MAX_SIZE, when given).
import http from "node:http";
import { createHash } from "node:crypto";

const [origin, creationPath, interopArg, maxSizeArg] = process.argv.slice(2);
const interop = Number(interopArg);
const base = new URL(origin);
const completeHeader = interop === 3 ? "upload-incomplete" : "upload-complete";
const flag = (complete) => (interop === 3 ? (complete ? "?0" : "?1") : complete ? "?1" : "?0");
const appendType = interop >= 6 ? { "content-type": "application/partial-upload" } : {};
const SHOWN = [
  "location", "upload-offset", "upload-complete", "upload-incomplete", "upload-length",
  "upload-limit", "cache-control", "content-type", "accept-patch", "repr-digest",
  "upload-draft-interop-version", "tus-resumable",
];

function data(size, seed) {
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i++) out[i] = (i * 13 + seed + (i >> 9)) & 255;
  return out;
}

// One request; `cutAfter` sends that many body bytes of a longer declared
// body, then destroys the connection.
function request(method, path, headers, body, cutAfter) {
  return new Promise((resolve) => {
    const req = http.request(
      { host: base.hostname, port: base.port, method, path, agent: false,
        headers: { "upload-draft-interop-version": String(interop), ...headers } },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.alloc(0) }));
      },
    );
    req.on("error", (error) => resolve({ status: 0, headers: {}, body: Buffer.from(String(error.code || error)) }));
    if (cutAfter !== undefined) {
      req.write(body.subarray(0, cutAfter), () => setTimeout(() => {
        req.destroy();
        resolve({ status: 0, headers: {}, body: Buffer.from("cut by the client") });
      }, 300));
    } else {
      req.end(body);
    }
  });
}

function report(step, answer) {
  const headers = {};
  for (const name of SHOWN) if (answer.headers[name] !== undefined) headers[name] = answer.headers[name];
  let body;
  const text = answer.body.toString("utf8");
  if (text.length > 0 && text.length < 2000) {
    try { body = JSON.parse(text); } catch { body = text.trim(); }
  }
  process.stdout.write(JSON.stringify({ step, status: answer.status, headers, body }) + "\n");
  return answer;
}

const resolve = (location) => new URL(location, origin).pathname;
const size = 3 * 1024 * 1024 + 17;
const file = data(size, 1);

report("options", await request("OPTIONS", creationPath, {}, Buffer.alloc(0)));
const created = report("careful creation", await request("POST", creationPath,
  { [completeHeader]: flag(false), "upload-length": String(size), "content-length": "0" }, Buffer.alloc(0)));
const url = created.headers.location ? resolve(created.headers.location) : null;
if (url) {
  report("offset", await request("HEAD", url, {}, Buffer.alloc(0)));
  const first = 1024 * 1024;
  report("append", await request("PATCH", url,
    { ...appendType, "upload-offset": "0", [completeHeader]: flag(false), "content-length": String(first) },
    file.subarray(0, first)));
  await request("PATCH", url,
    { ...appendType, "upload-offset": String(first), [completeHeader]: flag(false), "content-length": String(first) },
    file.subarray(first, 2 * first), first / 2);
  report("cut", { status: 0, headers: {}, body: Buffer.alloc(0) });
  const after = report("offset after the cut", await request("HEAD", url, {}, Buffer.alloc(0)));
  const offset = Number(after.headers["upload-offset"] ?? first);
  report("stale", await request("PATCH", url,
    { ...appendType, "upload-offset": "0", [completeHeader]: flag(false), "content-length": "10" },
    file.subarray(0, 10)));
  report("last", await request("PATCH", url,
    { ...appendType, "upload-offset": String(offset), [completeHeader]: flag(true), "content-length": String(size - offset) },
    file.subarray(offset)));
  report("offset when complete", await request("HEAD", url, {}, Buffer.alloc(0)));
  report("after complete", await request("PATCH", url,
    { ...appendType, "upload-offset": String(size), [completeHeader]: flag(true), "content-length": "1" },
    Buffer.from("x")));
}
const small = data(100_000, 2);
const digest = createHash("sha256").update(small).digest("base64");
report("optimistic creation", await request("POST", creationPath,
  { [completeHeader]: flag(true), "content-length": String(small.length), "content-type": "text/plain",
    "repr-digest": `sha-256=:${digest}:` }, small));
report("optimistic creation, wrong digest", await request("POST", creationPath,
  { [completeHeader]: flag(true), "content-length": String(small.length),
    "repr-digest": `sha-256=:${createHash("sha256").update("other").digest("base64")}:` }, small));
const doomed = await request("POST", creationPath,
  { [completeHeader]: flag(false), "content-length": "5" }, Buffer.from("hello"));
if (doomed.headers.location) {
  const doomedUrl = resolve(doomed.headers.location);
  report("cancel", await request("DELETE", doomedUrl, {}, Buffer.alloc(0)));
  report("offset after cancel", await request("HEAD", doomedUrl, {}, Buffer.alloc(0)));
}
if (maxSizeArg) {
  report("too large", await request("POST", creationPath,
    { [completeHeader]: flag(false), "upload-length": String(Number(maxSizeArg) + 1), "content-length": "0" }, Buffer.alloc(0)));
}
