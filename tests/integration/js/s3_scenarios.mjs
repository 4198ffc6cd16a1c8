// Scenarios that drive granary with the AWS SDK for JavaScript v3, run by
// tests/integration/test_js_sdk.py:
//
//   GRANARY_ENDPOINT=http://127.0.0.1:PORT GRANARY_ACCESS_KEY=... GRANARY_SECRET_KEY=... \
//     node s3_scenarios.mjs <scenario> <bucket>
//
// (GRANARY_BUCKET may stand in for the second argument.) Each scenario prints one JSON
// object on stdout: {"ok": true, "sdk": <client-s3 version>, "result": {...}, "requests":
// [...]} where "requests" are the headers the SDK really sent (recorded after signing), or
// {"ok": false, "error": {...}, ...} with exit status 1 when an SDK call threw. The client
// keeps the SDK's defaults (CRC32 request checksums, aws-chunked with a trailer for stream
// bodies, response checksum validation) and turns off retries so failures show first time.
import { createHash, randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { Readable } from "node:stream";
import zlib from "node:zlib";

import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteBucketCorsCommand,
  DeleteBucketPolicyCommand,
  DeleteBucketTaggingCommand,
  DeleteObjectCommand,
  DeleteObjectTaggingCommand,
  DeleteObjectsCommand,
  GetBucketCorsCommand,
  GetBucketEncryptionCommand,
  GetBucketPolicyCommand,
  GetBucketPolicyStatusCommand,
  GetBucketTaggingCommand,
  GetBucketVersioningCommand,
  GetObjectAclCommand,
  GetObjectCommand,
  GetObjectTaggingCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectVersionsCommand,
  ListObjectsV2Command,
  NoSuchKey,
  PutBucketCorsCommand,
  PutBucketPolicyCommand,
  PutBucketTaggingCommand,
  PutBucketVersioningCommand,
  PutObjectCommand,
  PutObjectTaggingCommand,
  S3Client,
  S3ServiceException,
  paginateListBuckets,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { createPresignedPost } from "@aws-sdk/s3-presigned-post";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

const require = createRequire(import.meta.url);
const SDK_VERSION = require("@aws-sdk/client-s3/package.json").version;
const LIB_STORAGE_VERSION = require("@aws-sdk/lib-storage/package.json").version;

const KiB = 1024;
const MiB = 1024 * KiB;

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`environment variable ${name} is not set`);
  return v;
}

const [scenario, bucketArg] = process.argv.slice(2);
const bucket = bucketArg || process.env.GRANARY_BUCKET;

const clientConfig = {
  endpoint: need("GRANARY_ENDPOINT"),
  region: "us-east-1",
  forcePathStyle: true,
  maxAttempts: 1,
  credentials: {
    accessKeyId: need("GRANARY_ACCESS_KEY"),
    secretAccessKey: need("GRANARY_SECRET_KEY"),
  },
};
const client = new S3Client(clientConfig);

// What went on the wire: the deserialize step is the innermost, so the request it sees is
// the signed one (flexible checksums, aws-chunked framing and all).
const requests = [];
// Set by checksum-mode's negative control: rewrites the next response's headers before the
// SDK's response checksum validation sees them.
let tamperResponse = null;
const RECORDED = /^(content-encoding|content-length|content-md5|content-type|transfer-encoding|x-amz-content-sha256|x-amz-trailer|x-amz-decoded-content-length|x-amz-sdk-checksum-algorithm|x-amz-checksum-.*|range)$/;
client.middlewareStack.add(
  (next, context) => async (args) => {
    const req = args.request;
    const headers = {};
    for (const [k, v] of Object.entries(req.headers ?? {})) {
      if (RECORDED.test(k.toLowerCase())) headers[k.toLowerCase()] = v;
    }
    const entry = { command: context.commandName, method: req.method, path: req.path, headers };
    requests.push(entry);
    const out = await next(args);
    entry.status = out.response?.statusCode;
    if (tamperResponse && out.response?.headers) tamperResponse(out.response.headers);
    return out;
  },
  { step: "deserialize", name: "granaryRequestRecorder", priority: "low" },
);

// --- helpers -----------------------------------------------------------------------------

const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");
const md5hex = (buf) => createHash("md5").update(buf).digest("hex");
// zlib.crc32 is Node >= 20.15; Debian 12's own Node.js is 18, so a table-driven CRC-32
// (the same IEEE polynomial) stands in for it there.
const crc32Table = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let i = 0; i < 8; i++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
const crc32 = zlib.crc32 ?? ((buf) => {
  let c = 0xffffffff;
  for (const byte of buf) c = crc32Table[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
});
const crc32raw = (buf) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(crc32(buf) >>> 0);
  return b;
};
const crc32b64 = (buf) => crc32raw(buf).toString("base64");

// Deterministic-size, random-content payloads (checked by hash on both sides).
const payload = (size) => randomBytes(size);

// A Readable that yields `buf` in `chunk`-sized pieces: the SDK cannot hash it up front,
// so it sends it aws-chunked with the checksum in a trailer.
function streamOf(buf, chunk = 64 * KiB) {
  return Readable.from(
    (function* () {
      for (let i = 0; i < buf.length; i += chunk) yield buf.subarray(i, i + chunk);
    })(),
    { objectMode: false },
  );
}

async function readAll(body) {
  if (!body) return Buffer.alloc(0);
  return Buffer.from(await body.transformToByteArray());
}

function errorInfo(e) {
  return {
    name: e?.name,
    message: e?.message,
    status: e?.$metadata?.httpStatusCode,
    fault: e?.$fault,
    code: e?.Code,
    requestId: e?.$metadata?.requestId,
    isS3ServiceException: e instanceof S3ServiceException,
    stack: e?.stack?.split("\n").slice(0, 6).join("\n"),
  };
}

async function expectError(fn) {
  try {
    const out = await fn();
    return { threw: false, status: out?.$metadata?.httpStatusCode };
  } catch (e) {
    return { threw: true, ...errorInfo(e), instanceOfNoSuchKey: e instanceof NoSuchKey };
  }
}

const send = (cmd) => client.send(cmd);

async function getFull(key, extra = {}) {
  const out = await send(new GetObjectCommand({ Bucket: bucket, Key: key, ...extra }));
  const body = await readAll(out.Body); // consuming the body runs the SDK's checksum check
  return { out, body };
}

// --- scenarios ----------------------------------------------------------------------------

const ROUNDTRIP_PREFIX = "rt/";

// CreateBucket, then PutObject (Buffer and stream bodies) / GetObject / HeadObject /
// ListObjectsV2. The objects stay for the caller to check with boto3; "roundtrip-delete"
// removes them.
async function roundtripPut() {
  const created = await send(new CreateBucketCommand({ Bucket: bucket }));
  const head = await send(new HeadBucketCommand({ Bucket: bucket }));
  const cases = [
    { key: "empty", size: 0, kind: "buffer" },
    { key: "one-byte", size: 1, kind: "buffer" },
    { key: "odd-4k", size: 4 * KiB + 7, kind: "buffer" },
    { key: "over-inline", size: 128 * KiB + 1, kind: "buffer" },
    { key: "one-mib", size: MiB, kind: "buffer" },
    { key: "one-mib-plus", size: MiB + 12345, kind: "buffer" },
    { key: "stream-small", size: 10, kind: "stream" },
    { key: "stream-1mib", size: MiB, kind: "stream" },
    { key: "stream-3mib-odd", size: 3 * MiB + 321, kind: "stream" },
  ];
  const objects = [];
  for (const c of cases) {
    const key = ROUNDTRIP_PREFIX + c.key;
    const data = payload(c.size);
    const body = c.kind === "stream" ? streamOf(data) : data;
    const put = await send(new PutObjectCommand({
      Bucket: bucket, Key: key, Body: body, ContentLength: c.size,
    }));
    const putRequest = requests[requests.length - 1];
    const { out: got, body: back } = await getFull(key);
    const getRequest = requests[requests.length - 1];
    const headOut = await send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    objects.push({
      key, size: c.size, kind: c.kind,
      sent: { sha256: sha256(data), md5: md5hex(data), crc32: crc32b64(data) },
      put: {
        etag: put.ETag, checksumCRC32: put.ChecksumCRC32, checksumType: put.ChecksumType,
        status: put.$metadata.httpStatusCode, request: putRequest.headers,
      },
      get: {
        status: got.$metadata.httpStatusCode, contentLength: got.ContentLength,
        etag: got.ETag, checksumCRC32: got.ChecksumCRC32, contentEncoding: got.ContentEncoding ?? null,
        sha256: sha256(back), length: back.length,
        checksumModeSent: getRequest.headers["x-amz-checksum-mode"] ?? null,
      },
      head: {
        status: headOut.$metadata.httpStatusCode, contentLength: headOut.ContentLength,
        etag: headOut.ETag, contentEncoding: headOut.ContentEncoding ?? null,
      },
    });
  }
  const listed = [];
  let token;
  do {
    const page = await send(new ListObjectsV2Command({
      Bucket: bucket, Prefix: ROUNDTRIP_PREFIX, MaxKeys: 4, ContinuationToken: token,
    }));
    for (const o of page.Contents ?? []) listed.push({ key: o.Key, size: o.Size, etag: o.ETag });
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return {
    createBucketStatus: created.$metadata.httpStatusCode,
    headBucketStatus: head.$metadata.httpStatusCode,
    objects, listed,
  };
}

async function roundtripDelete() {
  const listed = await send(new ListObjectsV2Command({ Bucket: bucket, Prefix: ROUNDTRIP_PREFIX }));
  const keys = (listed.Contents ?? []).map((o) => o.Key);
  const deletes = [];
  for (const key of keys) {
    const out = await send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
    deletes.push({ key, status: out.$metadata.httpStatusCode });
  }
  const again = await send(new DeleteObjectCommand({ Bucket: bucket, Key: ROUNDTRIP_PREFIX + "never-existed" }));
  const after = await send(new ListObjectsV2Command({ Bucket: bucket, Prefix: ROUNDTRIP_PREFIX }));
  const headGone = await expectError(() => send(new HeadObjectCommand({ Bucket: bucket, Key: keys[0] })));
  return {
    deletes,
    deleteMissingStatus: again.$metadata.httpStatusCode,
    keyCountAfter: after.KeyCount,
    contentsAfter: (after.Contents ?? []).map((o) => o.Key),
    headGone,
  };
}

// User metadata, Content-Type and the other stored system headers, with a Buffer body and
// with a stream body (whose Content-Encoding the SDK sends as "gzip,aws-chunked").
async function metadata() {
  const meta = { color: "blue", "mixed-case-name": "Value With Spaces", "x-num": "42", punct: "a=b;c,d/e" };
  const plain = payload(2000);
  const putA = await send(new PutObjectCommand({
    Bucket: bucket, Key: "meta/plain", Body: plain,
    ContentType: "application/vnd.granary.test+json; charset=utf-8",
    Metadata: meta,
    CacheControl: "max-age=3600, must-revalidate",
    ContentDisposition: 'attachment; filename="report.json"',
    ContentLanguage: "de-CH",
  }));
  const gz = zlib.gzipSync(payload(300 * KiB));
  const putB = await send(new PutObjectCommand({
    Bucket: bucket, Key: "meta/streamed.gz", Body: streamOf(gz, 32 * KiB), ContentLength: gz.length,
    ContentType: "text/csv", ContentEncoding: "gzip", Metadata: { source: "stream", "Upper-Key": "UPPER" },
  }));
  const putBRequest = requests[requests.length - 1].headers;
  const putC = await send(new PutObjectCommand({ Bucket: bucket, Key: "meta/default-type", Body: Buffer.from("x") }));
  const putCRequest = requests[requests.length - 1].headers;
  const describe = async (key) => {
    const headOut = await send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    const { out: got, body } = await getFull(key);
    const pick = (o) => ({
      contentType: o.ContentType ?? null, metadata: o.Metadata ?? {}, cacheControl: o.CacheControl ?? null,
      contentDisposition: o.ContentDisposition ?? null, contentLanguage: o.ContentLanguage ?? null,
      contentEncoding: o.ContentEncoding ?? null, contentLength: o.ContentLength,
    });
    return { head: pick(headOut), get: { ...pick(got), sha256: sha256(body) } };
  };
  return {
    statuses: [putA, putB, putC].map((p) => p.$metadata.httpStatusCode),
    sentMetadata: meta,
    streamedRequest: putBRequest,
    plain: { sha256: sha256(plain), ...(await describe("meta/plain")) },
    streamed: { sha256: sha256(gz), size: gz.length, ...(await describe("meta/streamed.gz")) },
    defaultTypeRequest: putCRequest,
    defaultType: await describe("meta/default-type"),
  };
}

// Ranged GETs across an inline object and a multi-stripe one (4+2 stripes are 4 MiB of
// data in 1 MiB fragments), plus an unsatisfiable range.
async function ranged() {
  const big = payload(5 * MiB + 333);
  const small = payload(1000);
  await send(new PutObjectCommand({ Bucket: bucket, Key: "range/big", Body: big }));
  await send(new PutObjectCommand({ Bucket: bucket, Key: "range/small", Body: small }));
  const specs = [
    ["range/small", "bytes=0-0"],
    ["range/small", "bytes=10-19"],
    ["range/small", "bytes=-7"],
    ["range/small", "bytes=990-"],
    ["range/small", "bytes=500-5000"],
    ["range/big", "bytes=0-99"],
    ["range/big", "bytes=1048570-1048589"],
    ["range/big", "bytes=4194300-4194310"],
    ["range/big", "bytes=1000000-3200000"],
    ["range/big", "bytes=-1000"],
    ["range/big", "bytes=5242000-"],
    ["range/big", `bytes=${big.length - 1}-${big.length + 100000}`],
  ];
  const results = [];
  for (const [key, range] of specs) {
    const full = key === "range/big" ? big : small;
    const total = full.length;
    let [a, b] = range.slice(6).split("-");
    let start, end;
    if (a === "") { start = total - Number(b); end = total - 1; }
    else { start = Number(a); end = b === "" ? total - 1 : Math.min(Number(b), total - 1); }
    const expected = full.subarray(start, end + 1);
    const { out, body } = await getFull(key, { Range: range });
    results.push({
      key, range,
      status: out.$metadata.httpStatusCode,
      contentRange: out.ContentRange ?? null,
      expectedContentRange: `bytes ${start}-${end}/${total}`,
      contentLength: out.ContentLength,
      length: body.length,
      expectedLength: expected.length,
      sha256: sha256(body),
      expectedSha256: sha256(expected),
      checksumCRC32: out.ChecksumCRC32 ?? null,
    });
  }
  const unsatisfiable = await expectError(() =>
    getFull("range/big", { Range: `bytes=${big.length}-` }));
  return {
    big: { sha256: sha256(big), size: big.length },
    small: { sha256: sha256(small), size: small.length },
    results, unsatisfiable,
  };
}

// lib-storage Upload: ~20 MiB in 5 MiB parts (CreateMultipartUpload with ChecksumAlgorithm
// CRC32, parts with x-amz-checksum-crc32, Complete listing the part checksums).
async function multipart() {
  const partSize = 5 * MiB;
  const data = payload(20 * MiB + 4321);
  const key = "mpu/twenty-mib";
  const upload = new Upload({
    client, params: { Bucket: bucket, Key: key, Body: data, ContentType: "application/x-tar", Metadata: { kind: "mpu" } },
    partSize, queueSize: 4, leavePartsOnError: false,
  });
  const progress = [];
  upload.on("httpUploadProgress", (p) => progress.push(p.part));
  const done = await upload.done();
  const parts = [];
  for (let off = 0; off < data.length; off += partSize) parts.push(data.subarray(off, off + partSize));
  const expectedEtag = `"${md5hex(Buffer.concat(parts.map((p) => createHash("md5").update(p).digest())))}-${parts.length}"`;
  const expectedComposite = `${crc32b64(Buffer.concat(parts.map(crc32raw)))}-${parts.length}`;
  const { out: got, body } = await getFull(key);
  const headOut = await send(new HeadObjectCommand({ Bucket: bucket, Key: key, ChecksumMode: "ENABLED" }));
  return {
    libStorage: LIB_STORAGE_VERSION,
    size: data.length, partCount: parts.length,
    sent: { sha256: sha256(data), crc32: crc32b64(data) },
    done: { etag: done.ETag, key: done.Key, bucket: done.Bucket, checksumCRC32: done.ChecksumCRC32 ?? null, checksumType: done.ChecksumType ?? null },
    expectedEtag, expectedComposite,
    partRequests: requests.filter((r) => r.command === "UploadPartCommand").map((r) => ({ status: r.status, headers: r.headers })),
    createRequest: requests.find((r) => r.command === "CreateMultipartUploadCommand")?.headers,
    get: {
      status: got.$metadata.httpStatusCode, contentLength: got.ContentLength, length: body.length,
      sha256: sha256(body), crc32: crc32b64(body), etag: got.ETag, checksumCRC32: got.ChecksumCRC32 ?? null,
      checksumType: got.ChecksumType ?? null, contentType: got.ContentType, metadata: got.Metadata,
    },
    head: { etag: headOut.ETag, contentLength: headOut.ContentLength, checksumCRC32: headOut.ChecksumCRC32 ?? null, checksumType: headOut.ChecksumType ?? null },
  };
}

// Every algorithm the SDK supports, header (Buffer body) and trailer (stream body), inline
// and fragment-crossing sizes; GetObject with ChecksumMode ENABLED validates what it reads.
async function checksumMode() {
  const algorithms = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"];
  const sizes = [0, 1000, MiB + 100 * KiB];
  const results = [];
  for (const algorithm of algorithms) {
    for (const size of sizes) {
      for (const kind of ["buffer", "stream"]) {
        const key = `ck/${algorithm}/${size}/${kind}`;
        const data = payload(size);
        const put = await send(new PutObjectCommand({
          Bucket: bucket, Key: key, Body: kind === "stream" ? streamOf(data) : data,
          ContentLength: size, ChecksumAlgorithm: algorithm,
        }));
        const putRequest = requests[requests.length - 1].headers;
        const field = `Checksum${algorithm}`;
        let got, body, getError = null;
        try {
          ({ out: got, body } = await getFull(key, { ChecksumMode: "ENABLED" }));
        } catch (e) {
          getError = errorInfo(e);
        }
        const headOut = await send(new HeadObjectCommand({ Bucket: bucket, Key: key, ChecksumMode: "ENABLED" }));
        results.push({
          key, algorithm, size, kind,
          sha256: sha256(data),
          putRequest,
          putChecksum: put[field] ?? null,
          getError,
          getChecksum: got?.[field] ?? null,
          getChecksumType: got?.ChecksumType ?? null,
          getSha256: body ? sha256(body) : null,
          headChecksum: headOut[field] ?? null,
        });
      }
    }
  }
  // Negative control: the same GET with a wrong x-amz-checksum-crc32 in the response must
  // throw, which shows the passes above were really validated by the SDK.
  const control = payload(5000);
  await send(new PutObjectCommand({ Bucket: bucket, Key: "ck/control", Body: control }));
  tamperResponse = (headers) => {
    for (const k of Object.keys(headers)) if (k.toLowerCase() === "x-amz-checksum-crc32") headers[k] = crc32b64(Buffer.from("not the body"));
  };
  const tampered = await expectError(() => getFull("ck/control", { ChecksumMode: "ENABLED" }));
  tamperResponse = null;
  return { results, tampered };
}

async function deleteObjects() {
  const keys = ["batch/a", "batch/b", "batch/c d", "batch/e&f", "batch/g<h>", "batch/keep"];
  for (const key of keys) await send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.from(key) }));
  const first = await send(new DeleteObjectsCommand({
    Bucket: bucket,
    Delete: { Objects: [...keys.slice(0, 4), "batch/never-existed"].map((Key) => ({ Key })) },
  }));
  const firstRequest = requests[requests.length - 1].headers;
  const afterFirst = await send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "batch/" }));
  const quiet = await send(new DeleteObjectsCommand({
    Bucket: bucket, Delete: { Objects: [{ Key: "batch/g<h>" }], Quiet: true },
  }));
  const afterQuiet = await send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "batch/" }));
  return {
    requested: [...keys.slice(0, 4), "batch/never-existed"],
    request: firstRequest,
    first: {
      status: first.$metadata.httpStatusCode,
      deleted: (first.Deleted ?? []).map((d) => d.Key).sort(),
      errors: first.Errors ?? [],
    },
    afterFirst: (afterFirst.Contents ?? []).map((o) => o.Key),
    quiet: { status: quiet.$metadata.httpStatusCode, deleted: quiet.Deleted ?? [], errors: quiet.Errors ?? [] },
    afterQuiet: (afterQuiet.Contents ?? []).map((o) => o.Key),
  };
}

// Conditional deletes: DeleteObject's IfMatch and DeleteObjects' per-key ETag.
async function conditionalDeletes() {
  const put = async (key) =>
    (await send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.from(key) }))).ETag;
  const etag = await put("cond/one");
  const wrong = await expectError(() =>
    send(new DeleteObjectCommand({ Bucket: bucket, Key: "cond/one", IfMatch: `"${md5hex("x")}"` })));
  const keptAfterWrong = (await getFull("cond/one")).body.toString();
  const missing = await expectError(() =>
    send(new DeleteObjectCommand({ Bucket: bucket, Key: "cond/none", IfMatch: "*" })));
  const right = await send(new DeleteObjectCommand({ Bucket: bucket, Key: "cond/one", IfMatch: etag }));
  const a = await put("cond/a");
  await put("cond/b");
  const batch = await send(new DeleteObjectsCommand({
    Bucket: bucket,
    Delete: { Objects: [{ Key: "cond/a", ETag: a }, { Key: "cond/b", ETag: `"${md5hex("x")}"` }] },
  }));
  const left = await send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "cond/" }));
  return {
    wrong, keptAfterWrong, missing,
    right: right.$metadata.httpStatusCode,
    deleted: (batch.Deleted ?? []).map((d) => d.Key),
    errors: (batch.Errors ?? []).map((e) => ({ Key: e.Key, Code: e.Code })),
    left: (left.Contents ?? []).map((o) => o.Key),
  };
}

async function tagging() {
  const key = "tags/obj";
  await send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.from("t"), Tagging: "a=1&b=two%20words" }));
  const onPut = await send(new GetObjectTaggingCommand({ Bucket: bucket, Key: key }));
  await send(new PutObjectTaggingCommand({
    Bucket: bucket, Key: key, Tagging: { TagSet: [{ Key: "stage", Value: "clean" }] },
  }));
  const putRequest = requests[requests.length - 1].headers;
  const replaced = await send(new GetObjectTaggingCommand({ Bucket: bucket, Key: key }));
  await send(new DeleteObjectTaggingCommand({ Bucket: bucket, Key: key }));
  const cleared = await send(new GetObjectTaggingCommand({ Bucket: bucket, Key: key }));
  const invalid = await expectError(() => client.send(new PutObjectTaggingCommand({
    Bucket: bucket, Key: key, Tagging: { TagSet: [{ Key: "aws:x", Value: "1" }] },
  })));
  return {
    onPut: onPut.TagSet, replaced: replaced.TagSet, putRequest, cleared: cleared.TagSet ?? [],
    invalid,
  };
}

// Bucket settings Granary cannot set: read as never set, set as NotImplemented.
async function bucketSettings() {
  const versioning = await send(new GetBucketVersioningCommand({ Bucket: bucket }));
  return {
    versioningStatus: versioning.Status ?? null,
    versioningHttp: versioning.$metadata.httpStatusCode,
    policy: await expectError(() => client.send(new GetBucketPolicyCommand({ Bucket: bucket }))),
    tagging: await expectError(() => client.send(new GetBucketTaggingCommand({ Bucket: bucket }))),
    encryption: await expectError(() => client.send(new GetBucketEncryptionCommand({ Bucket: bucket }))),
    enableVersioning: await expectError(() => client.send(new PutBucketVersioningCommand({
      Bucket: bucket, VersioningConfiguration: { Status: "Enabled" },
    }))),
  };
}

// A bucket policy that lets anyone read one prefix: set, read back with its status, used
// by a request without credentials, deleted.
async function bucketPolicy() {
  const policy = {
    Version: "2012-10-17",
    Statement: [{
      Sid: "OpenData", Effect: "Allow", Principal: "*", Action: "s3:GetObject",
      Resource: `arn:aws:s3:::${bucket}/open/*`,
    }],
  };
  await send(new PutObjectCommand({ Bucket: bucket, Key: "open/a", Body: "anyone" }));
  await send(new PutObjectCommand({ Bucket: bucket, Key: "closed/b", Body: "owner" }));
  const put = await send(new PutBucketPolicyCommand({ Bucket: bucket, Policy: JSON.stringify(policy) }));
  const got = await send(new GetBucketPolicyCommand({ Bucket: bucket }));
  const status = await send(new GetBucketPolicyStatusCommand({ Bucket: bucket }));
  const endpoint = need("GRANARY_ENDPOINT");
  const anonymous = async (key) => {
    const res = await fetch(`${endpoint}/${bucket}/${key}`);
    return { status: res.status, body: await res.text() };
  };
  const open = await anonymous("open/a");
  const closed = await anonymous("closed/b");
  const deleted = await send(new DeleteBucketPolicyCommand({ Bucket: bucket }));
  return {
    putHttp: put.$metadata.httpStatusCode,
    policy: JSON.parse(got.Policy),
    sent: policy,
    isPublic: status.PolicyStatus?.IsPublic ?? null,
    open,
    closed: closed.status,
    deleteHttp: deleted.$metadata.httpStatusCode,
    openAfterDelete: (await anonymous("open/a")).status,
    afterDelete: await expectError(() => client.send(new GetBucketPolicyCommand({ Bucket: bucket }))),
  };
}

// CORS rules for a browser app: set (the SDK adds a checksum: PutBucketCors requires
// one), read back, and deleted.
async function cors() {
  const rules = [
    {
      ID: "app", AllowedOrigins: ["https://app.example.com"], AllowedMethods: ["GET", "PUT"],
      AllowedHeaders: ["*"], ExposeHeaders: ["ETag"], MaxAgeSeconds: 3000,
    },
    { AllowedOrigins: ["*"], AllowedMethods: ["HEAD"] },
  ];
  const put = await send(new PutBucketCorsCommand({ Bucket: bucket, CORSConfiguration: { CORSRules: rules } }));
  const putRequest = requests[requests.length - 1].headers;
  const got = await send(new GetBucketCorsCommand({ Bucket: bucket }));
  const deleted = await send(new DeleteBucketCorsCommand({ Bucket: bucket }));
  return {
    putHttp: put.$metadata.httpStatusCode,
    putRequest,
    rules: got.CORSRules,
    deleteHttp: deleted.$metadata.httpStatusCode,
    afterDelete: await expectError(() => client.send(new GetBucketCorsCommand({ Bucket: bucket }))),
  };
}

// Bucket tags: set (the SDK adds a checksum), read, replaced by an empty set, deleted.
async function bucketTagging() {
  const put = await send(new PutBucketTaggingCommand({
    Bucket: bucket, Tagging: { TagSet: [{ Key: "team", Value: "data" }, { Key: "cost", Value: "42" }] },
  }));
  const got = await send(new GetBucketTaggingCommand({ Bucket: bucket }));
  const invalid = await expectError(() => client.send(new PutBucketTaggingCommand({
    Bucket: bucket, Tagging: { TagSet: [{ Key: "aws:x", Value: "1" }] },
  })));
  const deleted = await send(new DeleteBucketTaggingCommand({ Bucket: bucket }));
  return {
    putHttp: put.$metadata.httpStatusCode,
    tags: got.TagSet,
    invalid,
    deleteHttp: deleted.$metadata.httpStatusCode,
    afterDelete: await expectError(() => client.send(new GetBucketTaggingCommand({ Bucket: bucket }))),
  };
}

// A bucket emptied through its versions, as tools do: list them page by page, delete each
// (Key, VersionId); and an object's ACL.
async function versions() {
  for (const key of ["v/a", "v/b", "v/c"]) {
    await send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.from(key) }));
  }
  const acl = await send(new GetObjectAclCommand({ Bucket: bucket, Key: "v/a" }));
  const pages = [];
  let keyMarker;
  let versionIdMarker;
  for (;;) {
    const page = await send(new ListObjectVersionsCommand({
      Bucket: bucket, Prefix: "v/", MaxKeys: 2, KeyMarker: keyMarker, VersionIdMarker: versionIdMarker,
    }));
    pages.push({
      versions: (page.Versions ?? []).map((v) => ({ key: v.Key, versionId: v.VersionId, isLatest: v.IsLatest, size: v.Size })),
      truncated: page.IsTruncated, nextKeyMarker: page.NextKeyMarker ?? null,
      nextVersionIdMarker: page.NextVersionIdMarker ?? null,
    });
    if (!page.IsTruncated) break;
    keyMarker = page.NextKeyMarker;
    versionIdMarker = page.NextVersionIdMarker;
  }
  const objects = pages.flatMap((p) => p.versions.map((v) => ({ Key: v.key, VersionId: v.versionId })));
  const deleted = await send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objects } }));
  const after = await send(new ListObjectVersionsCommand({ Bucket: bucket, Prefix: "v/" }));
  return {
    grants: (acl.Grants ?? []).map((g) => g.Permission),
    pages,
    deleted: (deleted.Deleted ?? []).map((d) => ({ key: d.Key, versionId: d.VersionId })),
    errors: deleted.Errors ?? [],
    left: (after.Versions ?? []).length,
  };
}

// A browser form upload: createPresignedPost signs a policy, and the form goes out as a
// browser's FormData (fetch's multipart/form-data), once within the policy and once with a
// file larger than its content-length-range.
async function presignedPost() {
  const { url, fields } = await createPresignedPost(client, {
    Bucket: bucket,
    Key: "post/${filename}",
    Conditions: [["content-length-range", 1, 1 * MiB], ["starts-with", "$Content-Type", "text/"],
      { success_action_status: "201" }],
    Fields: { "Content-Type": "text/plain", success_action_status: "201" },
    Expires: 600,
  });
  const postForm = async (data) => {
    const form = new FormData();
    for (const [k, v] of Object.entries(fields)) form.append(k, v);
    form.append("file", new Blob([data]), "hello.txt");
    const res = await fetch(url, { method: "POST", body: form });
    return { status: res.status, body: await res.text() };
  };
  const data = payload(200 * KiB);
  const posted = await postForm(data);
  const got = await getFull("post/hello.txt");
  const tooLarge = await postForm(payload(1 * MiB + 1));
  return {
    url,
    fieldNames: Object.keys(fields).sort(),
    posted,
    md5: md5hex(data),
    got: { md5: md5hex(got.body), contentType: got.out.ContentType },
    tooLarge,
  };
}

// Presigned URLs (getSignedUrl), used with fetch as a browser or another program would. The
// presigner moves every x-amz-* header into the query (x-amz-meta-*, x-amz-tagging...):
// the object must get them. With the SDK's default checksums the URL also carries the CRC32
// of the empty body it was signed without (AAAAAA==), so any real body fails its checksum,
// on AWS as here (aws-sdk-js-v3 #6994); `requestChecksumCalculation: "WHEN_REQUIRED"` is
// the documented way to presign uploads.
async function presignedUrl() {
  const key = "presigned/obj";
  const data = payload(100 * KiB);
  const put = async (signer) => {
    const url = await getSignedUrl(signer, new PutObjectCommand({
      Bucket: bucket, Key: key, ContentType: "text/plain", Metadata: { colour: "blue" },
      Tagging: "team=ml&tier=hot",
    }), { expiresIn: 600 });
    const res = await fetch(url, { method: "PUT", body: data, headers: { "content-type": "text/plain" } });
    return { query: [...new URL(url).searchParams.keys()].sort(), status: res.status, body: await res.text() };
  };
  const withDefaults = await put(client);
  const whenRequired = await put(new S3Client({ ...clientConfig, requestChecksumCalculation: "WHEN_REQUIRED" }));
  const head = await send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
  const tags = await send(new GetObjectTaggingCommand({ Bucket: bucket, Key: key }));
  const getUrl = await getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: key }), { expiresIn: 600 });
  const got = await fetch(getUrl);
  const body = Buffer.from(await got.arrayBuffer());
  return {
    withDefaults,
    whenRequired,
    metadata: head.Metadata,
    contentType: head.ContentType,
    tags: (tags.TagSet ?? []).map((t) => `${t.Key}=${t.Value}`).sort(),
    get: { status: got.status, md5: md5hex(body) },
    md5: md5hex(data),
  };
}

// ListBuckets by pages: five buckets under a prefix, two a page, through the SDK's
// paginator; another region lists nothing; a bad page size is refused.
async function listBuckets() {
  const names = ["a", "b", "c", "d", "e"].map((s) => `${bucket}-lb-${s}`);
  for (const name of names) await send(new CreateBucketCommand({ Bucket: name }));
  try {
    const pages = [];
    for await (const page of paginateListBuckets({ client, pageSize: 2 }, { Prefix: `${bucket}-lb-` })) {
      pages.push({
        names: (page.Buckets ?? []).map((b) => b.Name),
        regions: (page.Buckets ?? []).map((b) => b.BucketRegion),
        token: page.ContinuationToken ?? null,
        prefix: page.Prefix ?? null,
      });
    }
    const all = await send(new ListBucketsCommand({}));
    const elsewhere = await send(new ListBucketsCommand({ BucketRegion: "eu-west-1" }));
    const badSize = await expectError(() => client.send(new ListBucketsCommand({ MaxBuckets: 0 })));
    return {
      names,
      pages,
      allHasThem: names.every((n) => (all.Buckets ?? []).some((b) => b.Name === n)),
      allToken: all.ContinuationToken ?? null,
      elsewhere: (elsewhere.Buckets ?? []).length,
      badSize,
    };
  } finally {
    // Whatever was created goes; a failed delete must not hide the error that got here.
    for (const name of names) await send(new DeleteBucketCommand({ Bucket: name })).catch(() => {});
  }
}

async function errors() {
  return {
    getMissingKey: await expectError(() => getFull("no/such/key")),
    headMissingKey: await expectError(() => send(new HeadObjectCommand({ Bucket: bucket, Key: "no/such/key" }))),
    getMissingBucket: await expectError(() => client.send(new GetObjectCommand({ Bucket: bucket + "-missing", Key: "k" }))),
  };
}

const SCENARIOS = {
  "roundtrip-put": roundtripPut,
  "roundtrip-delete": roundtripDelete,
  metadata,
  ranged,
  multipart,
  "checksum-mode": checksumMode,
  "delete-objects": deleteObjects,
  "conditional-deletes": conditionalDeletes,
  tagging,
  "bucket-settings": bucketSettings,
  cors,
  "bucket-tagging": bucketTagging,
  "bucket-policy": bucketPolicy,
  versions,
  "presigned-post": presignedPost,
  "presigned-url": presignedUrl,
  "list-buckets": listBuckets,
  errors,
};

async function main() {
  const fn = SCENARIOS[scenario];
  if (!fn || !bucket) {
    process.stderr.write(`usage: node s3_scenarios.mjs {${Object.keys(SCENARIOS).join("|")}} <bucket>\n`);
    process.exit(2);
  }
  try {
    const result = await fn();
    process.stdout.write(JSON.stringify({ ok: true, sdk: SDK_VERSION, scenario, result, requests }) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, sdk: SDK_VERSION, scenario, error: errorInfo(e), requests }) + "\n");
    process.exitCode = 1;
  }
}

await main();
