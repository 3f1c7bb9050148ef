'use strict';
// A chaos consumer node made of Apache's RocketMQ 5 Node.js client (rocketmq-client-nodejs 1.0.8, a
// PushConsumer over POP) and a thin journal: the Node.js twin of chaos/real_clients/py5/consumer.py,
// started with the same arguments. The harness runs it under node in place of
// `python -m nodes consumer`, with `--endpoints` the loopback addresses of this node's own link
// proxies to the brokers' RocketMQ 5 ports; those proxies rewrite the brokers' endpoints in route
// and assignment answers to themselves, so every receive, ack and heartbeat crosses a link a
// partition can cut. One `READY {json}` line on stdout; SIGTERM = graceful stop (the client shuts
// down), SIGKILL, SIGSTOP/SIGCONT as for any node. Imports nothing from mqlab.
//
// The listener journals each message, then answers SUCCESS (the client acks after it returns), so
// a kill may lose an ack, never the evidence of a delivery. It writes, in --run-dir:
//   deliveries.jsonl  one line per message, written with fs.writeSync before the listener returns
//                     (docs/real-clients-chaos.md lists the fields)
//   events.jsonl      consumer-start / consumer-stop (with client_id); receives, acks and
//                     redeliveries come from the brokers' own pop events, which carry the client id.
//
// The 5.x message carries no queue: where it was popped from is read from the receipt handle
// mqlab's broker hands out (`p1 <kind> <broker> <group> <queue topic> <queue id> <queue offset>
// <phys offset> ...`, nodes/common/receipt_handle.py); a handle of another shape leaves those null.
//
// What this client does differently from the Python one, and how the wrapper lives with it:
//   - several endpoints become one gRPC target `h:p,h:p`, which grpc-js resolves as a single DNS
//     name and never reaches: the client is given the first of --endpoints (a master's link) only;
//     the brokers it consumes from come from the route answers, one endpoint each.
//   - its listener is called at once for every received message (no consumption threads): the
//     wrapper lets --threads calls work at a time, as the Python client's thread pool does.
//   - its message view keeps no store timestamp: the wrapper reads it from the receive answers
//     as they arrive, keyed by receipt handle.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const util = require('node:util');
const zlib = require('node:zlib');

const CLIENT = 'node5';
const JOURNAL_FILE = 'deliveries.jsonl';
const EVENTS_FILE = 'events.jsonl';
const HANDLE_VERSION = 'p1';
const HANDLE_FIELDS = 11;
const STARTUP_RETRY_MS = 1000;
const PACKAGE = 'rocketmq-client-nodejs';
const BOOTSTRAP = './scripts/bootstrap.sh';

function usage(text) {
  process.stderr.write(`${text}\n`);
  process.exit(2);
}

let opts;
try {
  ({ values: opts } = util.parseArgs({
    options: {
      endpoints: { type: 'string' },
      group: { type: 'string' },
      topic: { type: 'string' },
      'node-id': { type: 'string' },
      port: { type: 'string' },
      'run-dir': { type: 'string' },
      'sleep-ms': { type: 'string', default: '0' },
      threads: { type: 'string', default: '4' },
      'sharding-key-property': { type: 'string' },
      'seq-property': { type: 'string' },
      'timeout-s': { type: 'string', default: '3' },
    },
  }));
} catch (err) {
  usage(String(err.message));
}
for (const name of ['endpoints', 'group', 'topic', 'node-id', 'port', 'run-dir', 'sharding-key-property',
  'seq-property']) {
  if (!opts[name]) usage(`--${name} is required`);
}
const endpoints = opts.endpoints.split(';');
if (!endpoints.every(e => /^127\.0\.0\.1:\d+$/.test(e))) {
  usage(`--endpoints must be loopback addresses 127.0.0.1:PORT, got ${opts.endpoints}`);
}
const nodeId = opts['node-id'];
const port = Number(opts.port);
const sleepMs = Number(opts['sleep-ms']);
const threads = Math.max(1, Number(opts.threads));
const runDir = path.resolve(opts['run-dir']);
fs.mkdirSync(runDir, { recursive: true });
// the client's default logger writes under $HOME/logs/rocketmq: keep it in the node's dir
process.env.HOME = runDir;

let client;
try {
  client = require(path.join(__dirname, 'node_modules', PACKAGE));
} catch (err) {
  process.stderr.write(`Apache's RocketMQ 5 Node.js client is not installed under ${__dirname} ` +
    `(${err.message}); run ${BOOTSTRAP}, or cd ${__dirname} && npm ci\n`);
  process.exit(3);
}
const { PushConsumer, ConsumeResult } = client;

function monoMs() {
  // CLOCK_MONOTONIC in ms, the checker's timeline (hrtime is CLOCK_MONOTONIC on Linux)
  return Number(process.hrtime.bigint() / 1000000n);
}

// Whole lines with one write each: in the page cache when writeSync returns, so a SIGKILL right
// after keeps them. Node runs the listener on one thread: no lock.
class Journal {
  constructor(file) {
    this.fd = fs.openSync(file, 'a');
  }

  write(records) {
    const data = Buffer.from(records.map(r => JSON.stringify(r) + '\n').join(''));
    let done = 0;
    while (done < data.length) {
      done += fs.writeSync(this.fd, data, done, data.length - done);
    }
  }

  close() {
    fs.closeSync(this.fd);
  }
}

// The client's own logger (egg-logger) is closed by its shutdown before its last line, which then
// prints "log stream had been closed": this one, to the client's default file, has no close.
const logFd = (() => {
  const file = path.join(runDir, 'logs', 'rocketmq', 'rocketmq_client_nodejs.log');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  return fs.openSync(file, 'a');
})();
function logAt(level) {
  return (...args) => {
    fs.writeSync(logFd, `${new Date().toISOString()} ${level} ${process.pid} ${util.format(...args)}\n`);
  };
}
const logger = { info: logAt('INFO'), warn: logAt('WARN'), error: logAt('ERROR'), debug: () => {} };

function handleFields(handle) {
  const parts = typeof handle === 'string' ? handle.split(' ') : [];
  if (parts.length !== HANDLE_FIELDS || parts[0] !== HANDLE_VERSION) {
    return { pop_kind: null, broker_name: null, queue_topic: null, queue_id: null, queue_offset: null,
      commitlog_offset: null };
  }
  const numbers = [parts[5], parts[6], parts[7]].map(p => (/^-?\d+$/.test(p) ? Number(p) : null));
  const [queueId, queueOffset, physOffset] = numbers.includes(null) ? [null, null, null] : numbers;
  return { pop_kind: parts[1], broker_name: parts[2], queue_topic: parts[4], queue_id: queueId,
    queue_offset: queueOffset, commitlog_offset: physOffset };
}

function asInt(text) {
  return typeof text === 'string' && /^-?\d+$/.test(text) ? Number(text) : null;
}

const storeTimestamps = new Map(); // receipt handle -> store timestamp (ms), until its listener call

function record(clientId, msg, result) {
  const props = msg.properties || new Map();
  const body = msg.body || Buffer.alloc(0);
  const attempt = msg.deliveryAttempt;
  const keys = [...(msg.keys || [])].sort();
  const storeMs = storeTimestamps.get(msg.receiptHandle);
  storeTimestamps.delete(msg.receiptHandle);
  const line = {
    event: 'deliver', node: nodeId, group: opts.group, client_id: clientId,
    msg_id: props.get('UNIQ_KEY') || msg.messageId,
    keys: keys.length ? keys.join(' ') : null, tags: msg.tag || null, topic: msg.topic,
    ...handleFields(msg.receiptHandle),
    delivery_attempt: Number.isInteger(attempt) ? attempt : null,
    reconsume_times: Number.isInteger(attempt) ? attempt - 1 : null,
    origin_msg_id: props.get('ORIGIN_MESSAGE_ID') || null,
    sharding_key: props.get(opts['sharding-key-property']) || null, seq: asInt(props.get(opts['seq-property'])),
    message_group: msg.messageGroup || null,
    body_sha256: crypto.createHash('sha256').update(body).digest('hex'), body_crc32: zlib.crc32(body),
    body_bytes: body.length,
    store_timestamp_ms: storeMs ?? null,
    born_timestamp_ms: msg.bornTimestamp ? msg.bornTimestamp.getTime() : null,
    wall_ms: Date.now(), mono_ms: monoMs(), result, orderly: false,
  };
  if (line.queue_topic === null) line.queue_topic = msg.topic;
  return line;
}

function event(name, fields) {
  return { event: name, node: nodeId, side: 'client', wall_ms: Date.now(), mono_ms: monoMs(), ...fields };
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

// At most `threads` listener calls at work at once; the rest wait their turn in arrival order.
function limiter(slots) {
  let free = slots;
  const waiting = [];
  return async function run(task) {
    if (free > 0) {
      free -= 1;
    } else {
      await new Promise(resolve => waiting.push(resolve));
    }
    try {
      return await task();
    } finally {
      const next = waiting.shift();
      if (next) next(); else free += 1;
    }
  };
}

// Note each received message's store timestamp: the client's MessageView drops it.
function noteStoreTimestamps(consumer) {
  const manager = consumer.rpcClientManager;
  const receive = manager.receiveMessage.bind(manager);
  manager.receiveMessage = async (...args) => {
    const responses = await receive(...args);
    for (const response of responses) {
      try {
        if (!response.hasMessage()) continue;
        const props = response.getMessage().getSystemProperties();
        const stored = props && props.getStoreTimestamp();
        if (stored) storeTimestamps.set(props.getReceiptHandle(), stored.toDate().getTime());
      } catch (err) {
        logger.warn('store timestamp not read: %s', err);
      }
    }
    return responses;
  };
}

async function main() {
  const journal = new Journal(path.join(runDir, JOURNAL_FILE));
  const events = new Journal(path.join(runDir, EVENTS_FILE));
  const results = {};
  const slot = limiter(threads);
  let stopping = false;
  const stopped = new Promise(resolve => {
    const stop = () => {
      stopping = true;
      resolve('stop');
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  const holder = { clientId: '' };

  const listener = {
    async consume(message) {
      return slot(async () => {
        try {
          if (sleepMs > 0) await sleep(sleepMs);
          journal.write([record(holder.clientId, message, 'CONSUME_SUCCESS')]);
        } catch (err) { // journalling failed: have it redelivered rather than acked unseen
          process.stderr.write(`listener error: ${err && err.stack || err}\n`);
          return ConsumeResult.FAILURE;
        }
        results.CONSUME_SUCCESS = (results.CONSUME_SUCCESS || 0) + 1;
        return ConsumeResult.SUCCESS;
      });
    },
  };

  function newConsumer() {
    const consumer = new PushConsumer({
      endpoints: endpoints[0], namespace: '', consumerGroup: opts.group,
      subscriptions: new Map([[opts.topic, '*']]), messageListener: listener, logger,
      requestTimeout: Number(opts['timeout-s']) * 1000,
    });
    noteStoreTimestamps(consumer);
    holder.clientId = consumer.clientId;
    return consumer;
  }

  let consumer = newConsumer();
  // READY before the client starts: the harness creates the suite's topic only once every node is
  // up, and the 5.x client's startup fails while its topic has no route
  process.stdout.write('READY ' + JSON.stringify({ node_id: nodeId, role: 'consumer', addr: `127.0.0.1:${port}`,
    port, pid: process.pid, client: CLIENT, client_id: consumer.clientId }) + '\n');
  while (!stopping) {
    const starting = consumer.startup();
    starting.catch(() => {}); // a start the stop overtook may still fail later: not an unhandled rejection
    try {
      if (await Promise.race([starting, stopped]) !== 'stop') break;
    } catch (err) {
      process.stderr.write(`startup failed, retrying in 1 s: ${err && err.message}` +
        `${err && err.cause ? ` (cause: ${err.cause.message || err.cause})` : ''}\n`);
      if (await Promise.race([sleep(STARTUP_RETRY_MS), stopped]) === 'stop') break;
      if (consumer.topicRouteCache.size > 0) {
        // it failed after its routes came, with its timers running: shut it down, start a new one
        consumer.shutdown().catch(e => process.stderr.write(`shutdown of a failed start: ${e}\n`));
        consumer = newConsumer();
      } // else it failed fetching routes, before it scheduled anything: the same one tries again
    }
  }
  const clientId = consumer.clientId;
  events.write([event('consumer-start', { group: opts.group, client_id: clientId, client: CLIENT,
    subscriptions: { [opts.topic]: '*' }, orderly: false })]);
  await stopped;
  const began = Date.now();
  try {
    // stops receiving, waits for held receives and for every cached message to be settled
    await consumer.shutdown();
  } catch (err) {
    process.stderr.write(`shutdown failed: ${err && err.stack || err}\n`);
  }
  process.stderr.write(`shutdown took ${Date.now() - began} ms\n`);
  events.write([event('consumer-stop', { group: opts.group, client_id: clientId, client: CLIENT,
    results: { ...results } })]);
  journal.close();
  events.close();
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`node5 consumer failed: ${err && err.stack || err}\n`);
  process.exit(1);
});
