'use strict';
// A Strongroom client in Node.js, written from protos/ and protos/README.md alone: it publishes
// following NOT_LEADER redirects, deduplicates a retry, has one bad input refused, subscribes
// with credit and acknowledges on the stream, then checks that nothing is left pending.
//
//   npm install && node client.js --endpoints 127.0.0.1:7101,127.0.0.1:7102 [--count 20]
//
// It prints one JSON object (what happened) on stdout and exits 0, or 1 with the error.

const path = require('node:path');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTOS = process.env.STRONGROOM_PROTOS || path.resolve(__dirname, '..', '..', 'protos');
const api = grpc.loadPackageDefinition(protoLoader.loadSync(
  ['strongroom/v1/messaging.proto', 'strongroom/v1/admin.proto'],
  { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [PROTOS] },
)).strongroom.v1;

// google.rpc.Status and ErrorInfo (shipped in protos/google/rpc) decode grpc-status-details-bin.
const rpc = new protobuf.Root();
rpc.resolvePath = (_origin, target) => path.join(PROTOS, target);
rpc.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
const Status = rpc.lookupType('google.rpc.Status');
const ErrorInfo = rpc.lookupType('google.rpc.ErrorInfo');

/** The ErrorInfo of a failed call: {reason, metadata}, or null when it carries none. */
function errorInfo(err) {
  const raw = err.metadata && err.metadata.get('grpc-status-details-bin')[0];
  if (!raw) return null;
  for (const any of Status.decode(raw).details) {
    if (any.type_url === 'type.googleapis.com/google.rpc.ErrorInfo') {
      const info = ErrorInfo.decode(any.value);
      return { reason: info.reason, metadata: info.metadata || {} };
    }
  }
  return null;
}

// Mutual TLS, as `strongroom up` runs a cluster: the authority's certificate and this client's
// own certificate and key, PEM files named by STRONGROOM_TLS_CA, _CERT and _KEY (for a local
// cluster: .strongroom/tls/ca.pem and .strongroom/tls/issued/user-admin.pem and .key). Without
// them, plaintext (a cluster started with `strongroom up --insecure`).
const fs = require('node:fs');
function credentials() {
  const [ca, cert, key] = ['STRONGROOM_TLS_CA', 'STRONGROOM_TLS_CERT', 'STRONGROOM_TLS_KEY'].map((n) => process.env[n]);
  if (!ca && !cert && !key) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(fs.readFileSync(ca), fs.readFileSync(key), fs.readFileSync(cert));
}
const CREDENTIALS = credentials();

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const unary = (client, method, request) => new Promise((resolve, reject) => {
  client[method](request, { deadline: Date.now() + 10000 }, (err, reply) => (err ? reject(err) : resolve(reply)));
});

/** Calls the leader, wherever it is: follows NOT_LEADER to the leader it names, else tries the
 * next endpoint; retries what is retriable (UNAVAILABLE, NOT_LEADER) for up to 30 s. */
class Cluster {
  constructor(endpoints) {
    this.endpoints = endpoints;
    this.leader = endpoints[0];
    this.redirects = 0;
    this.clients = new Map();
  }

  client(address, Service = api.MessagingService) {
    const key = `${Service.serviceName}@${address}`;
    if (!this.clients.has(key)) this.clients.set(key, new Service(address, CREDENTIALS));
    return this.clients.get(key);
  }

  async call(method, request) {
    const until = Date.now() + 30000;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await unary(this.client(this.leader), method, request);
      } catch (err) {
        const info = errorInfo(err);
        const retriable = err.code === grpc.status.UNAVAILABLE || (info && info.reason === 'NOT_LEADER');
        if (!retriable || Date.now() > until) throw err;
        const named = info && info.metadata.leader_address;
        if (named && named !== this.leader) {
          this.redirects += 1;
          this.leader = named; // the member that answered named the leader: go there at once
          continue;
        }
        // No leader named (none elected yet, or the member is down): the next endpoint, later.
        this.leader = this.endpoints[(this.endpoints.indexOf(this.leader) + 1) % this.endpoints.length];
        await sleep(Math.min(500, 20 * 2 ** attempt));
      }
    }
  }

  close() {
    for (const c of this.clients.values()) c.close();
  }
}

/** Subscribe with `credit`, ack each batch on the stream and give the credit back as messages
 * are consumed, until `count` messages came. */
function consume(cluster, destination, count, credit) {
  return new Promise((resolve, reject) => {
    const call = cluster.client(cluster.leader).Subscribe();
    const bodies = [];
    const counts = [];
    let refusals = 0;
    const timer = setTimeout(() => { call.cancel(); reject(new Error(`${bodies.length} of ${count} messages came`)); },
      20000);
    call.on('data', (resp) => {
      if (resp.response === 'deliveries') {
        const seqs = resp.deliveries.deliveries.map((d) => d.message_seq);
        for (const d of resp.deliveries.deliveries) {
          bodies.push(Buffer.from(d.message.body).toString());
          counts.push(d.delivery_count);
        }
        // Acks give no credit back: grant what was used, as the application takes messages.
        call.write({ ack: { message_seqs: seqs } });
        call.write({ credit: seqs.length });
        if (bodies.length >= count) {
          clearTimeout(timer);
          call.end();
          resolve({ bodies, counts, refusals });
        }
      } else if (resp.response === 'refusals') {
        refusals += resp.refusals.refusals.length;
      } else if (resp.response === 'closed') {
        clearTimeout(timer);
        reject(new Error(`subscription closed: ${resp.closed.reason} ${JSON.stringify(resp.closed.metadata)}`));
      }
    });
    call.on('error', (err) => { clearTimeout(timer); reject(err); });
    call.write({ open: { destination, credit, client_name: 'node-example' } });
  });
}

async function main() {
  const args = process.argv.slice(2);
  const option = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
  const endpoints = option('--endpoints', '127.0.0.1:7101').split(',');
  const count = Number(option('--count', '20'));
  const destination = option('--destination', 'node-example.queue');
  const cluster = new Cluster(endpoints);
  const producer = crypto.randomUUID();
  const out = { destination };

  // Publish, each message with its id (producer, sequence from 1), confirmed once committed.
  const seqs = [];
  for (let i = 1; i <= count; i += 1) {
    const reply = await cluster.call('Publish', {
      destination, mode: 'PUBLISH_MODE_STORE_CONFIRM_SEND',
      message: { body: Buffer.from(`m${i}`), producer_id: producer, sequence: i, fields: { n: { int_value: i } } },
    });
    if (!reply.confirmed) throw new Error(`message ${i} not confirmed`);
    seqs.push(reply.message_seq);
  }
  out.leader = cluster.leader;
  out.redirects = cluster.redirects;
  out.published = seqs.length;

  // The same id again (a retry after a lost answer): stored once, answered duplicate.
  const retry = await cluster.call('Publish', {
    destination, message: { body: Buffer.from('m1'), producer_id: producer, sequence: 1 },
  });
  out.retry = { duplicate: retry.duplicate, same_seq: retry.message_seq === seqs[0] };

  // One bad input: a request without a message is refused, nothing stored.
  try {
    await cluster.call('Publish', { destination });
    out.bad_input = { code: 'OK' };
  } catch (err) {
    const info = errorInfo(err);
    out.bad_input = { code: grpc.status[err.code], reason: info && info.reason, message: err.details };
  }

  // Subscribe with a small credit window (the queue's own shared durable: no durable name).
  const got = await consume(cluster, destination, count, 8);
  out.received = got.bodies;
  out.delivery_counts = got.counts;
  out.refusals = got.refusals;

  // The acks took effect: nothing left pending on the queue's durable (acks commit shortly).
  const admin = cluster.client(cluster.leader, api.AdminService);
  let pending = -1;
  for (let i = 0; i < 50 && pending !== 0; i += 1) {
    const status = await unary(admin, 'Status', {});
    const durable = status.stores.flatMap((s) => s.durables).find((d) => d.destination === destination);
    pending = durable ? Number(durable.pending_messages) : -1;
    if (pending !== 0) await sleep(100);
  }
  out.pending_after_acks = pending;
  cluster.close();
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((err) => {
  process.stderr.write(`error: ${err.stack || err}\n`);
  process.exit(1);
});
