"""Uploads one file to a tus endpoint with tuspy, printing JSON lines like
tus_js_upload.mjs: {"event":"url"}, {"event":"progress"} per chunk, then
{"event":"success","url":...} or {"event":"error"} (exit code 1).

    python tuspy_upload.py ENDPOINT FILE CHUNK_BYTES|unbounded
"""
import json
import os
import sys

from tusclient import client


def main():
    endpoint, path, chunk = sys.argv[1:4]
    kwargs = {} if chunk == "unbounded" else {"chunk_size": int(chunk)}
    uploader = client.TusClient(endpoint).uploader(
        path, metadata={"filename": os.path.basename(path)}, retries=5, retry_delay=1, **kwargs)
    try:
        uploader.set_url(uploader.create_url())
        print(json.dumps({"event": "url", "url": uploader.url}), flush=True)
        while uploader.offset < uploader.get_file_size():
            uploader.upload_chunk()
            print(json.dumps({"event": "progress", "offset": uploader.offset}), flush=True)
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails
        print(json.dumps({"event": "error", "message": repr(error)}), flush=True)
        sys.exit(1)
    print(json.dumps({"event": "success", "url": uploader.url}), flush=True)


if __name__ == "__main__":
    main()
