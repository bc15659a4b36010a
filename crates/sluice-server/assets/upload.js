// The upload page: Uppy's Dashboard (drag and drop, several files, progress,
// pause and resume) uploading resumably with tus to this gateway, or straight
// to the bucket when the gateway signs direct uploads. GoldenRetriever keeps
// the files and the upload state across reloads. Uppy 6's aws-s3 sends no
// headers to its Companion, so with a token the page first asks the gateway
// for a session path that stands for it (docs/DIRECT.md). The token comes from the
// embedding application in the URL fragment (#token=...), which browsers never
// send to a server.
(async function () {
  "use strict";
  const config = JSON.parse(document.getElementById("sluice-config").textContent);
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token") || sessionStorage.getItem("sluice-token");
  if (fragment.get("token")) {
    sessionStorage.setItem("sluice-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const headers = token ? { authorization: "Bearer " + token } : {};
  document.getElementById("token-note").hidden = !(config.auth && !token);
  document.getElementById("mode").textContent =
    config.mode === "direct" ? "straight to the bucket, signed by the gateway" : "resumable (tus) through the gateway";

  const { Uppy, Dashboard, Tus, AwsS3, GoldenRetriever } = SluiceUppy;
  const MiB = 1024 * 1024;
  const uppy = new Uppy({
    id: "sluice-upload",
    autoProceed: false,
    restrictions: config.maxSize ? { maxFileSize: config.maxSize } : {},
  });
  uppy.use(Dashboard, {
    inline: true,
    target: "#uppy",
    width: "100%",
    height: 380,
    showProgressDetails: true,
    proudlyDisplayPoweredByUppy: false,
    note: config.maxSize ? "Files up to " + Math.floor(config.maxSize / MiB) + " MiB" : undefined,
  });
  // The key each tus upload got (X-Sluice-Key on the gateway's answers).
  const keys = new Map();
  if (config.mode === "direct") {
    let companionEndpoint = location.origin;
    if (token) {
      const answer = await fetch("/s3/session", { method: "POST", headers });
      const session = await answer.json();
      if (!answer.ok) {
        uppy.info(session.message || "no upload session: " + answer.status, "error", 10000);
        return;
      }
      companionEndpoint = location.origin + session.path;
    }
    uppy.use(AwsS3, { companionEndpoint, shouldUseMultipart: (f) => f.size > 100 * MiB });
  } else {
    uppy.use(Tus, {
      endpoint: new URL(config.tusPath, location.href).href,
      headers,
      chunkSize: 64 * MiB,
      retryDelays: [0, 1000, 3000, 5000],
      removeFingerprintOnSuccess: true,
      onAfterResponse(request, response) {
        const key = response.getHeader("X-Sluice-Key");
        if (key) keys.set(request.getURL().split("?")[0], decodeURIComponent(key));
      },
    });
  }
  uppy.use(GoldenRetriever, { indexedDB: { maxFileSize: 512 * MiB, maxTotalSize: 1024 * MiB } });

  function keyOf(response) {
    if (config.mode === "direct") {
      const key = (response.body && response.body.key) || "";
      return key.startsWith(config.keyPrefix) ? key.slice(config.keyPrefix.length) : key;
    }
    return keys.get((response.uploadURL || "").split("?")[0]) || "";
  }

  function cell(row, text, mono) {
    const td = row.insertCell();
    td.textContent = text;
    if (mono) td.className = "mono";
    return td;
  }

  uppy.on("upload-success", async (file, response) => {
    const key = keyOf(response);
    const row = document.querySelector("#done tbody").insertRow();
    row.dataset.key = key;
    cell(row, file.name);
    cell(row, key || "(unknown)", true);
    cell(row, String(file.size));
    const checksum = cell(row, "…", true);
    // The checksum the store verified, when the token may read the object.
    try {
      const path = key.split("/").map(encodeURIComponent).join("/");
      const answer = await fetch("/v1/objects/" + path, { method: "HEAD", headers });
      checksum.textContent = (answer.ok && answer.headers.get("x-sluice-checksum")) || "(not readable with this token)";
    } catch (error) {
      checksum.textContent = "(" + error + ")";
    }
    row.dataset.done = "1";
  });
  window.sluiceUppy = uppy;
})();
