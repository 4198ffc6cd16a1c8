"""SigV4 signing of aws-chunked streaming uploads, written from AWS's documentation
("Signature Calculations for the Authorization Header: Transferring Payload in Multiple
Chunks" and "... Including Trailing Headers"), independent of botocore, so tests can send
exactly the bytes they want with plain http.client.

  seed signature   = SigV4 of the request headers with x-amz-content-sha256 set to the
                     STREAMING-* marker in place of the payload hash
  chunk            = hex(size) ";chunk-signature=" sig CRLF data CRLF
  final chunk      = "0;chunk-signature=" sig CRLF CRLF
  chunk signature  = HMAC(signing key, "AWS4-HMAC-SHA256-PAYLOAD\\n" amz_date "\\n" scope "\\n"
                          previous_signature "\\n" sha256("") "\\n" sha256(data))
  unsigned trailer = hex(size) CRLF data CRLF ... "0" CRLF name ":" value CRLF CRLF
"""
import base64
import datetime
import hashlib
import hmac
import http.client
import urllib.parse
import zlib

ALGORITHM = "AWS4-HMAC-SHA256"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
SIG_HEX_LEN = 64


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret, date, region, service="s3"):
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def scope(amz_date, region, service="s3"):
    return f"{amz_date[:8]}/{region}/{service}/aws4_request"


def canonical_uri(path):
    # S3 encodes each path segment once; '/' separators stay literal.
    return urllib.parse.quote(path, safe="/-_.~")


def canonical_query(query):
    pairs = sorted((urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                   for k, v in (query or {}).items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def canonical_request(method, path, query, headers, payload_hash):
    """headers: dict of the headers to sign (names any case). Returns (text, signed_headers)."""
    canon = {}
    for name, value in headers.items():
        canon[name.lower().strip()] = " ".join(str(value).strip().split())
    names = sorted(canon)
    signed = ";".join(names)
    text = "\n".join([
        method,
        canonical_uri(path),
        canonical_query(query),
        "".join(f"{n}:{canon[n]}\n" for n in names),
        signed,
        payload_hash,
    ])
    return text, signed


def seed_signature(method, path, query, headers, payload_hash, access, secret, amz_date,
                   region, service="s3"):
    """Signs the request head. Returns (signature, authorization header value)."""
    creq, signed = canonical_request(method, path, query, headers, payload_hash)
    sc = scope(amz_date, region, service)
    sts = "\n".join([ALGORITHM, amz_date, sc, sha256_hex(creq.encode())])
    key = signing_key(secret, amz_date[:8], region, service)
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    auth = f"{ALGORITHM} Credential={access}/{sc}, SignedHeaders={signed}, Signature={sig}"
    return sig, auth


def chunk_signature(key, amz_date, sc, previous_signature, data):
    sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, sc, previous_signature,
                     EMPTY_SHA256, sha256_hex(data)])
    return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()


def split_chunks(data, chunk_size):
    """The data chunks, then the empty final chunk."""
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    return chunks + [b""]


def signed_encoded_length(decoded_length, chunk_size):
    total = 0
    sizes = [chunk_size] * (decoded_length // chunk_size)
    if decoded_length % chunk_size:
        sizes.append(decoded_length % chunk_size)
    sizes.append(0)
    for n in sizes:
        total += len(f"{n:x}") + len(";chunk-signature=") + SIG_HEX_LEN + 2 + n + 2
    return total


def signed_chunks(data, chunk_size, key, amz_date, sc, seed, tamper_index=None):
    """Yields (encoded frame bytes, signature) for each chunk including the final one.
    tamper_index: the index of a chunk whose signature is replaced by a wrong one (the chain
    continues from the correct signature, as an attacker who altered one frame would)."""
    prev = seed
    for i, chunk in enumerate(split_chunks(data, chunk_size)):
        sig = chunk_signature(key, amz_date, sc, prev, chunk)
        sent = sig
        if tamper_index is not None and i == tamper_index:
            sent = ("0" if sig[0] != "0" else "1") + sig[1:]
        frame = f"{len(chunk):x};chunk-signature={sent}\r\n".encode() + chunk + b"\r\n"
        yield frame, sig
        prev = sig


def crc32_b64(data):
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def unsigned_trailer_body(data, chunk_size, trailers):
    """trailers: list of (name, value). Returns the encoded body bytes."""
    out = bytearray()
    for chunk in split_chunks(data, chunk_size)[:-1]:
        out += f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    out += b"0\r\n"
    for name, value in trailers:
        out += f"{name}:{value}\r\n".encode()
    out += b"\r\n"
    return bytes(out)


class Response:
    def __init__(self, status, headers, body, send_error=None):
        self.status = status
        self.headers = headers
        self.body = body
        self.send_error = send_error  # an error while sending the body (server hung up early)

    def __repr__(self):
        return (f"Response(status={self.status}, headers={self.headers!r}, "
                f"body={self.body[:2000]!r}, send_error={self.send_error!r})")


def _send(endpoint, method, path, headers, frames, timeout=120):
    """Sends the request head then each body frame; returns a Response. The host header comes
    from `headers` exactly as signed."""
    u = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    send_error = None
    try:
        conn.putrequest(method, canonical_uri(path), skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        try:
            for frame in frames:
                conn.send(frame)
        except (BrokenPipeError, ConnectionResetError) as e:
            send_error = e  # the server answered and closed early; its answer may be readable
        r = conn.getresponse()
        return Response(r.status, dict(r.getheaders()), r.read(), send_error)
    finally:
        conn.close()


def amz_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def put_signed_streaming(endpoint, bucket, key, data, access, secret, chunk_size=64 * 1024,
                         region="us-east-1", tamper_index=None, extra_headers=None,
                         amz_date=None):
    """PUT /bucket/key with a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body. Returns a Response."""
    amz_date = amz_date or amz_now()
    host = urllib.parse.urlsplit(endpoint).netloc
    path = f"/{bucket}/{key}"
    headers = {
        "Host": host,
        "Content-Encoding": "aws-chunked",
        "Content-Length": str(signed_encoded_length(len(data), chunk_size)),
        "x-amz-content-sha256": STREAMING_SIGNED,
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(data)),
    }
    headers.update(extra_headers or {})
    seed, auth = seed_signature("PUT", path, {}, headers, STREAMING_SIGNED, access, secret,
                                amz_date, region)
    headers["Authorization"] = auth
    sk = signing_key(secret, amz_date[:8], region)
    frames = (f for f, _ in signed_chunks(data, chunk_size, sk, amz_date,
                                          scope(amz_date, region), seed, tamper_index))
    return _send(endpoint, "PUT", path, headers, frames)


def put_unsigned_trailer(endpoint, bucket, key, data, access, secret, chunk_size=64 * 1024,
                         region="us-east-1", crc32=None):
    """PUT with STREAMING-UNSIGNED-PAYLOAD-TRAILER and an x-amz-checksum-crc32 trailer
    (crc32: the base64 value to send; default the correct one). Returns a Response."""
    amz_date = amz_now()
    host = urllib.parse.urlsplit(endpoint).netloc
    path = f"/{bucket}/{key}"
    body = unsigned_trailer_body(
        data, chunk_size, [("x-amz-checksum-crc32", crc32 or crc32_b64(data))])
    headers = {
        "Host": host,
        "Content-Encoding": "aws-chunked",
        "Content-Length": str(len(body)),
        "x-amz-content-sha256": STREAMING_UNSIGNED_TRAILER,
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    _, auth = seed_signature("PUT", path, {}, headers, STREAMING_UNSIGNED_TRAILER, access,
                             secret, amz_date, region)
    headers["Authorization"] = auth
    return _send(endpoint, "PUT", path, headers,
                 (body[i:i + (1 << 20)] for i in range(0, len(body), 1 << 20)))
