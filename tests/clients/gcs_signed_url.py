"""A V4 signed URL as Google's own library makes it (google-cloud-storage),
for crates/sluice-cli/tests/verbs.rs to compare `sluice presign gs://…` with.

    python gcs_signed_url.py KEY_FILE ENDPOINT BUCKET OBJECT METHOD SECONDS TIMESTAMP

TIMESTAMP is the X-Goog-Date of sluice's URL (20261130T120000Z), so that both
sign the same moment; prints the URL.
"""

import sys
import urllib.parse

from google.cloud.storage import _signing
from google.oauth2 import service_account

key_file, endpoint, bucket, name, method, seconds, timestamp = sys.argv[1:]
credentials = service_account.Credentials.from_service_account_file(key_file)
# The path as Blob.generate_signed_url builds it: the name quoted, `/` kept.
resource = f"/{bucket}/{urllib.parse.quote(name, safe=b'/~')}"
print(_signing.generate_signed_url_v4(
    credentials,
    resource,
    expiration=int(seconds),
    api_access_endpoint=endpoint,
    method=method,
    _request_timestamp=timestamp,
))
