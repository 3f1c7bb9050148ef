'use strict';
// A chaos consumer node made of ali-ons 3.12.0 (a RocketMQ 4.x client written in JavaScript) and a
// thin journal. The harness runs it under node in place of `python -m nodes consumer` and treats it
// like any node: one `READY {json}` line on stdout, SIGTERM = graceful stop (ali-ons persists offsets
// and unregisters), SIGKILL, SIGSTOP/SIGCONT. ali-ons has no orderly consumption: concurrent only.
//
// It writes the same history files as mqlab's consumer node, in --run-dir:
//   deliveries.jsonl  one line per message, written synchronously *before* the handler returns
//   events.jsonl      consumer-start / consumer-stop (with client_id); ali-ons exposes no lock,
//                     rebalance or commit callbacks: those come from the brokers' own events.
//
// The name server is given as a loopback host:port (never an HTTP lookup: the http client below
// throws if ali-ons ever tries one). The client id is `<clientIP>@<instance>`, both set here.

const path = require('path');
const fs = require('fs');
const crypto = require('crypto');
const zlib = require('zlib');
const { parseArgs } = require('util');

const { values: opts } = parseArgs({
  options: {
    namesrv: { type: 'string' },
    group: { type: 'string' },
    topic: { type: 'string' },
    'node-id': { type: 'string' },
    port: { type: 'string' },
    'run-dir': { type: 'string' },
    instance: { type: 'string' },
    'broker-name': { type: 'string' },
    'sleep-ms': { type: 'string', default: '0' },
    'sharding-key-property': { type: 'string' },
    'seq-property': { type: 'string' },
  },
});

for (const name of ['namesrv', 'group', 'topic', 'node-id', 'port', 'run-dir', 'instance',
  'sharding-key-property', 'seq-property']) {
  if (!opts[name]) {
    process.stderr.write(`--${name} is required\n`);
    process.exit(2);
  }
}
if (!/^127\.0\.0\.1:\d+$/.test(opts.namesrv)) {
  process.stderr.write(`--namesrv must be a loopback address 127.0.0.1:PORT, got ${opts.namesrv}\n`);
  process.exit(2);
}

let ons;
try {
  ons = require(path.join(__dirname, 'js', 'node_modules', 'ali-ons'));
} catch (err) {
  process.stderr.write(`ali-ons 3.12.0 is not installed (${err.message}); run ./scripts/bootstrap.sh ` +
    `or cd ${path.join(__dirname, 'js')} && npm ci\n`);
  process.exit(3);
}

const CLIENT_IP = '127.0.0.1';
const clientId = `${CLIENT_IP}@${opts.instance}`;
const nodeId = opts['node-id'];
const sleepMs = Number(opts['sleep-ms']);
fs.mkdirSync(opts['run-dir'], { recursive: true });
// appendFileSync: the line is in the page cache before the handler returns (a SIGKILL keeps it)
const journalPath = path.join(opts['run-dir'], 'deliveries.jsonl');
const eventsPath = path.join(opts['run-dir'], 'events.jsonl');

function monoMs() {
  // CLOCK_MONOTONIC in ms, like the other processes' mono_ms (hrtime is CLOCK_MONOTONIC on Linux)
  return Number(process.hrtime.bigint() / 1000000n);
}

function event(name, fields) {
  const line = Object.assign({ event: name, node: nodeId, side: 'client', wall_ms: Date.now(), mono_ms: monoMs() },
    fields);
  fs.appendFileSync(eventsPath, JSON.stringify(line) + '\n');
}

const httpclient = {
  async request(url) {
    throw new Error(`no HTTP name-server lookups in a chaos run (${url})`);
  },
};
const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};

const results = {};

function deliveryLine(msg, mq) {
  const props = msg.properties || {};
  const body = msg.body;
  const retryTopic = props.RETRY_TOPIC || null;
  const seqText = props[opts['seq-property']];
  const seq = seqText !== undefined && /^-?\d+$/.test(seqText) ? Number(seqText) : null;
  return {
    event: 'deliver', node: nodeId, group: opts.group, client_id: clientId,
    msg_id: props.UNIQ_KEY || msg.msgId, keys: msg.keys ? [].concat(msg.keys).join(' ') : null,
    tags: msg.tags || null, topic: retryTopic || msg.topic, queue_topic: mq.topic,
    broker_name: mq.brokerName, queue_id: Number(mq.queueId), queue_offset: Number(msg.queueOffset),
    commitlog_offset: Number(msg.commitLogOffset), reconsume_times: Number(msg.reconsumeTimes),
    origin_msg_id: props.ORIGIN_MESSAGE_ID || null,
    sharding_key: props[opts['sharding-key-property']] || null, seq,
    body_sha256: crypto.createHash('sha256').update(body).digest('hex'),
    body_crc32: zlib.crc32(body), body_bytes: body.length,
    store_timestamp_ms: Number(msg.storeTimestamp), born_timestamp_ms: Number(msg.bornTimestamp),
    wall_ms: Date.now(), mono_ms: monoMs(), result: 'CONSUME_SUCCESS', orderly: false,
  };
}

async function main() {
  const consumer = new ons.Consumer({
    httpclient, logger, nameSrv: opts.namesrv, consumerGroup: opts.group, instanceName: opts.instance,
    clientIP: CLIENT_IP, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  });
  consumer.on('error', err => console.error('consumer error:', String(err && err.message).slice(0, 300)));
  consumer.subscribe(opts.topic, '*', async (msg, mq) => {
    if (sleepMs > 0) await new Promise(resolve => setTimeout(resolve, sleepMs));
    fs.appendFileSync(journalPath, JSON.stringify(deliveryLine(msg, mq)) + '\n');
    results.CONSUME_SUCCESS = (results.CONSUME_SUCCESS || 0) + 1;
  });
  await consumer.ready();
  event('consumer-start', { group: opts.group, client_id: clientId, client: 'ons', subscriptions: { [opts.topic]: '*' },
    orderly: false });
  const port = Number(opts.port);
  process.stdout.write('READY ' + JSON.stringify({ node_id: nodeId, role: 'consumer', addr: `127.0.0.1:${port}`,
    port, pid: process.pid, client: 'ons', client_id: clientId }) + '\n');
  await new Promise(resolve => {
    process.on('SIGTERM', resolve);
    process.on('SIGINT', resolve);
  });
  await consumer.close();
  event('consumer-stop', { group: opts.group, client_id: clientId, client: 'ons', results });
}

main().then(() => process.exit(0), err => {
  process.stderr.write(`ons consumer failed: ${err && err.stack || err}\n`);
  process.exit(1);
});
