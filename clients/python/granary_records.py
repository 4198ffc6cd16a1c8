"""Client for Granary's record index (docs/record-index.md), signed with botocore's SigV4.

    from granary_records import RecordClient
    rc = RecordClient("http://127.0.0.1:9000", "ACCESS", "SECRET")
    rc.put_container("data", "shard-000.tar", open("shard-000.tar", "rb").read())
    body = rc.get_record("data", "sample0001.jpg")
    for header, body in rc.batch_get("data", ["a.txt", "b.txt"]):
        ...

Uploads of big containers (multipart) go through boto3 with `index_uploads(client)`, which
adds x-granary-index to PutObject and CreateMultipartUpload.
"""
import base64
import json
import urllib.parse

import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class RecordError(Exception):
    """An S3 error response: status, AWS error code and message."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _quote(s, safe="-_.~"):
    # Record keys that are not UTF-8: bytes, or str with surrogate escapes (as os.fsdecode
    # gives).
    if isinstance(s, bytes):
        return urllib.parse.quote(s, safe=safe)
    return urllib.parse.quote(str(s), safe=safe, errors="surrogateescape")


def _quote_key(key):
    """A key as a URL path: "/" kept, and the segments "." and ".." percent-encoded, which
    urllib3 would otherwise resolve away (a/./b sent as a/b) after the request was signed."""
    quoted = _quote(key, safe="/-_.~")
    return "/".join({".": "%2E", "..": "%2E%2E"}.get(seg, seg) for seg in quoted.split("/"))


def key_of(obj):
    """The record key of a listed row or a batch header: "key", or, for a key that is not
    UTF-8, "key_b64" decoded to a str with surrogate escapes (it round-trips through every
    method here; `.encode("utf-8", "surrogateescape")` gives its bytes)."""
    if "key_b64" in obj:
        return base64.b64decode(obj["key_b64"]).decode("utf-8", "surrogateescape")
    return obj["key"]


def _key_field(key):
    """A key for a JSON request body: {"key": ...}, or {"key_b64": ...} for one that is not
    UTF-8 (bytes, or a str with surrogate escapes)."""
    raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
    try:
        return {"key": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"key_b64": base64.b64encode(raw).decode()}


def _with_key(obj):
    """A row or header with "key" set to key_of(obj) (and no "key_b64": "key" is exact)."""
    if "key_b64" in obj:
        obj["key"] = key_of(obj)
        del obj["key_b64"]
    return obj


def _keyed(r):
    """A dict with "key" (or "key_b64", which wins: rows as the server sends them) made
    into one with its key sent safely."""
    out = {k: v for k, v in r.items() if k not in ("key", "key_b64")}
    out.update(_key_field(key_of(r)))
    return out


def _request_record(r):
    """A batch GET entry (a key, or a dict with "key") with its key sent safely."""
    return _key_field(r) if isinstance(r, (str, bytes)) else _keyed(r)


def _error_of(resp):
    """The S3 <Error> of an answer; an answer without a body (HEAD) gets the status as its
    code and the reason as its message, as botocore gives them."""
    if not resp.data:
        return RecordError(resp.status, str(resp.status), resp.reason or "")
    code, message = "", resp.data[:500].decode("utf-8", "replace")
    try:
        import xml.etree.ElementTree as ET
        root = ET.fromstring(resp.data)
        code = root.findtext("Code") or ""
        message = root.findtext("Message") or message
    except Exception:
        pass
    return RecordError(resp.status, code, message)


def index_uploads(s3_client, index="auto", index_key=None):
    """Makes a boto3 S3 client ask for record indexing on every PutObject and
    CreateMultipartUpload (upload_file / put_object)."""

    def add(request, **_):
        request.headers["x-granary-index"] = index
        if index_key:
            request.headers["x-granary-index-key"] = index_key

    for op in ("PutObject", "CreateMultipartUpload"):
        s3_client.meta.events.register(f"before-sign.s3.{op}", add)
    return s3_client


# Limits of a batch get (include/granary/gateway/record_limits.h): batch_get splits its
# requests to fit.
MAX_BATCH_GET_KEYS = 10000
MAX_BATCH_GET_BODY = 8 << 20

# Reads (GET, HEAD, a batch get) are sent again, with backoff, after a connection error
# or a 500/503 answer (SlowDown, buffer memory spent), as the AWS SDKs do. Writes only
# when the request did not go out (a refused connection).
_READ_RETRIES = urllib3.Retry(total=4, backoff_factor=0.2, status_forcelist=(500, 503),
                              allowed_methods=frozenset({"GET", "HEAD", "POST"}),
                              raise_on_status=False, respect_retry_after_header=True)
_WRITE_RETRIES = urllib3.Retry(total=2, connect=2, read=0, status=0, other=0, redirect=0,
                               raise_on_status=False)


class RecordClient:
    def __init__(self, endpoint_url, access_key, secret_key, region="us-east-1", timeout=60):
        self.endpoint = endpoint_url.rstrip("/")
        self.credentials = Credentials(access_key, secret_key)
        self.region = region
        self.http = urllib3.PoolManager(num_pools=4, maxsize=16,
                                        timeout=urllib3.Timeout(connect=10, read=timeout),
                                        retries=False)

    @classmethod
    def from_boto3(cls, s3_client):
        creds = s3_client._request_signer._credentials.get_frozen_credentials()
        return cls(s3_client.meta.endpoint_url, creds.access_key, creds.secret_key,
                   s3_client.meta.region_name or "us-east-1")

    # ---- transport ---------------------------------------------------------------------
    def _request(self, method, bucket, key="", query=(), body=b"", headers=None,
                 preload=True, read=False):
        """`read`: a request that changes nothing, sent again on a retryable failure."""
        path = "/" + _quote(bucket) + ("/" + _quote_key(key) if key else "")
        qs = "&".join(_quote(k) + ("=" + _quote(v) if v is not None else "")
                      for k, v in query)
        url = self.endpoint + path + ("?" + qs if qs else "")
        req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        S3SigV4Auth(self.credentials, "s3", self.region).add_auth(req)
        resp = self.http.request(method, url, body=body or None, headers=dict(req.headers.items()),
                                 preload_content=preload,
                                 retries=_READ_RETRIES if read else _WRITE_RETRIES)
        if resp.status >= 300:
            if not preload:
                resp.read(cache_content=True)  # for _error_of's resp.data
                resp.release_conn()
            raise _error_of(resp)
        return resp

    # ---- writes ------------------------------------------------------------------------
    def put_container(self, bucket, key, data, index="auto", index_key=None):
        """Single PUT of a container with indexing; returns the record-index headers."""
        headers = {"x-granary-index": index}
        if index_key:
            headers["x-granary-index-key"] = index_key
        resp = self._request("PUT", bucket, key, body=data, headers=headers)
        return {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("x-granary-")}

    def set_bucket_index(self, bucket, index="auto", index_key=None):
        """Makes every upload to `bucket` indexed (index="off" stops it)."""
        body = {"index": index}
        if index_key:
            body["index_key"] = index_key
        return json.loads(self._request("PUT", bucket, "", [("record-index", None)],
                                        json.dumps(body).encode()).data)

    def get_bucket_index(self, bucket):
        return json.loads(self._request("GET", bucket, "", [("record-index", None)],
                                        read=True).data)

    def insert_rows(self, bucket, container, rows, format=None):
        """Batch insert of externally built rows: dicts with key, offset, length and
        optionally type and crc32c (hex). A key that is not UTF-8: bytes, or a str with
        surrogate escapes."""
        body = "".join(json.dumps(_keyed(r)) + "\n" for r in rows).encode()
        query = [("records", None)] + ([("format", format)] if format else [])
        return json.loads(self._request("POST", bucket, container, query, body).data)

    # ---- reads -------------------------------------------------------------------------
    def _record_query(self, key, container, type, raw, offset=None):
        q = [("record", None), ("key", key)]
        if container:
            q.append(("container", container))
        if offset is not None:
            q.append(("offset", str(offset)))
        if type is not None:
            q.append(("type", type))
        if raw:
            q.append(("raw", "1"))
        return q

    def get_record(self, bucket, key, container=None, type=None, raw=False, with_location=False,
                   offset=None):
        """The record's bytes: the newest location of `key`, or the row at `offset` of
        `container` (one of several of the same key in it)."""
        resp = self._request("GET", bucket, "",
                             self._record_query(key, container, type, raw, offset), read=True)
        if with_location:
            return resp.data, _location(resp.headers)
        return resp.data

    def head_record(self, bucket, key, container=None, type=None, raw=False, offset=None):
        resp = self._request("HEAD", bucket, "",
                             self._record_query(key, container, type, raw, offset), read=True)
        loc = _location(resp.headers)
        loc["size"] = int(resp.headers["Content-Length"])
        return loc

    def list_records(self, bucket, prefix=None, key=None, container=None, type=None,
                     page_size=None):
        """Every visible location, following continuation tokens."""
        token = None
        while True:
            q = [("records", None)]
            if prefix is not None:
                q.append(("prefix", prefix))
            if key is not None:
                q.append(("key", key))
            if container:
                q.append(("container", container))
            if type is not None:
                q.append(("type", type))
            if page_size:
                q.append(("max-records", page_size))
            if token:
                q.append(("continuation-token", token))
            page = json.loads(self._request("GET", bucket, "", q, read=True).data)
            yield from map(_with_key, page["records"])
            if not page["is_truncated"]:
                return
            token = page["next_continuation_token"]

    def container_records(self, bucket, container, page_size=1000, require_rows=False):
        """Rows of one container in offset order. Raises RecordError "ContainerChanged" if
        it is replaced between two pages (the rows would mix two versions). With
        `require_rows`, a container without rows whose indexing did not succeed (uploaded
        without x-granary-index, or `malformed`, `not-indexable`, `failed`) raises
        "NotIndexed" instead of listing nothing."""
        after = None
        version = None
        while True:
            q = [("records", None), ("max-records", page_size)]
            if after is not None:
                q.append(("after", after))
            page = json.loads(self._request("GET", bucket, container, q, read=True).data)
            if require_rows and after is None and not page["records"] \
                    and not page["is_truncated"] and page.get("status") != "indexed":
                why = page.get("status") or "not asked for"
                if page.get("message"):
                    why += ": " + page["message"]
                raise RecordError(0, "NotIndexed", f"{container}: no records (indexing {why})")
            if version is not None and page.get("container_version") != version:
                raise RecordError(0, "ContainerChanged",
                                  f"{container} was replaced while its rows were listed")
            version = page.get("container_version")
            yield from map(_with_key, page["records"])
            if not page["is_truncated"]:
                return
            after = page["next_after"]

    def batch_get(self, bucket, records, type="response", raw=False):
        """Yields (header, body) per requested record, in order. `records`: keys, or
        dicts {"key": ..., "container": ...[, "offset": ...]}. A failed record has
        header["status"] != 200 and an empty body. Raises if the stream ends early. Keys
        as in key_of. More records than one request may carry (MAX_BATCH_GET_KEYS,
        MAX_BATCH_GET_BODY) go in several, one after the other; header["index"] counts
        from the first record of the call."""
        entries = [json.dumps(_request_record(r)) for r in records]
        start = 0
        while start < len(entries) or start == 0:
            # The envelope: {"records": [...], "type": ..., "raw": ...}, with room to spare.
            size, end = 256 + len(json.dumps(type)), start
            while end < len(entries) and end - start < MAX_BATCH_GET_KEYS and \
                    size + len(entries[end]) + 2 <= MAX_BATCH_GET_BODY:
                size += len(entries[end]) + 2
                end += 1
            if end == start and end < len(entries):
                raise RecordError(0, "InvalidArgument", "a batch entry over the body limit")
            body = ('{"records": [' + ", ".join(entries[start:end]) + "], \"type\": " +
                    json.dumps(type) + ', "raw": ' + json.dumps(raw) + "}").encode()
            for header, data in self._batch_get_one(bucket, body):
                if "index" in header:
                    header["index"] += start
                yield header, data
            if end == len(entries):
                return
            start = end

    def _batch_get_one(self, bucket, body):
        resp = self._request("POST", bucket, "", [("records-batch", None)], body, preload=False,
                             read=True)
        ended = False
        try:
            reader = _FrameReader(resp)
            while True:
                header = json.loads(reader.line())
                if header.get("end"):
                    ended = True
                    return
                yield _with_key(header), reader.exactly(header["size"])
        finally:
            if ended:
                resp.drain_conn()  # the chunked body's last bytes: then it can serve again
            else:
                # Left early (the caller stopped, or an error): the rest of the stream is
                # still coming on this connection, and the pool would hand it to the next
                # request if it has not arrived yet.
                resp.close()
            resp.release_conn()


def _header_text(v):
    """A header value as the server sent it: UTF-8 bytes, which http.client decoded as
    Latin-1 (a container named données/s.tar would come back as donnÃ©es/s.tar)."""
    if v is None:
        return None
    try:
        return v.encode("latin-1").decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return v


def _location(headers):
    h = {k.lower(): v for k, v in headers.items()}
    out = {
        "container": _header_text(h.get("x-granary-record-container")),
        "offset": int(h["x-granary-record-offset"]),
        "length": int(h["x-granary-record-length"]),
        "crc32c": h.get("x-granary-record-crc32c"),
        "container_version": h.get("x-granary-record-container-version"),
    }
    if "x-granary-record-type" in h:
        out["type"] = _header_text(h["x-granary-record-type"])
    return out


class _FrameReader:
    def __init__(self, resp):
        self.resp = resp
        self.buf = bytearray()

    def _fill(self):
        chunk = self.resp.read(1 << 16)
        if not chunk:
            raise RecordError(0, "Truncated", "record stream ended early")
        self.buf += chunk

    def line(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return out
            self._fill()

    def exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out
