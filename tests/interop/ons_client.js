'use strict';
// Drive ali-ons 3.12.0 (a RocketMQ 4.x client written in JavaScript) against a name server; one
// JSON line per event on stdout. Run by the interop tests under node as a separate process; every
// mode exits on its own within --max-s seconds.
//
//   node ons_client.js produce --namesrv 127.0.0.1:9876 --group PG --plan '[{"topic","body","tags","keys","props"}]'
//   node ons_client.js push    --namesrv ... --group G --topic T [--fail-first BODY ...] [--expect N]
//
// Events (field "event"): "started"; "sent" (body, msg_id, queue, offset, status); "received" (topic,
// queue, queue_offset, body, tags, keys, properties, reconsume_times, msg_id, status, at_ms);
// "error" (where, message); "done" (reason).

const path = require('path');
const fs = require('fs');
const { parseArgs } = require('util');

function emit(event, fields) {
  // ali-ons prefixes the same error object's message again each time it re-emits it
  if (fields && typeof fields.message === 'string') fields.message = fields.message.slice(0, 500);
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

let ons;
try {
  ons = require(path.join(__dirname, '..', '..', 'chaos', 'real_clients', 'js', 'node_modules', 'ali-ons'));
} catch (err) {
  emit('error', { where: 'import', message: `ali-ons 3.12.0 is not installed: ${err.message}` });
  process.exit(3);
}

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    namesrv: { type: 'string' },
    group: { type: 'string' },
    topic: { type: 'string' },
    expression: { type: 'string', default: '*' },
    plan: { type: 'string' },
    'fail-first': { type: 'string', multiple: true, default: [] },
    expect: { type: 'string' },
    'linger-s': { type: 'string', default: '1' },
    'stop-file': { type: 'string' },
    'max-s': { type: 'string', default: '60' },
    'from-first': { type: 'boolean', default: false },
  },
});
const mode = positionals[0];
const maxMs = Number(opts['max-s']) * 1000;
const lingerMs = Number(opts['linger-s']) * 1000;
const expect = opts.expect === undefined ? null : Number(opts.expect);

// ali-ons asserts an http client even when a name server address is given; with nameSrv set it
// never looks the name server up over HTTP, so this one fails loudly if it is ever called.
const httpclient = {
  async request(url) {
    emit('error', { where: 'httpclient', message: `unexpected HTTP lookup of ${url}` });
    throw new Error(`interop driver: no HTTP lookups (${url})`);
  },
};

// ali-ons logs through this; warnings and errors go to stderr, which the tests keep.
const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};

function common() {
  return { httpclient, nameSrv: opts.namesrv, logger };
}

async function produce() {
  const producer = new ons.Producer(Object.assign(common(), { producerGroup: opts.group }));
  producer.on('error', err => emit('error', { where: 'producer', message: err.message }));
  await producer.ready();
  emit('started', { mode: 'produce', pid: process.pid });
  const deadline = Date.now() + maxMs;
  for (const item of JSON.parse(opts.plan)) {
    if (Date.now() > deadline) {
      emit('done', { reason: 'timeout' });
      break;
    }
    const msg = new ons.Message(item.topic, item.tags || null, item.body);
    if (item.keys) msg.keys = item.keys.split(' ');
    for (const [key, value] of Object.entries(item.props || {})) msg.properties[key] = value;
    try {
      const result = await producer.send(msg);
      emit('sent', {
        send: 'sync', body: item.body, msg_id: result.msgId, queue: Number(result.messageQueue.queueId),
        offset: result.queueOffset, status: result.sendStatus,
      });
    } catch (err) {
      emit('error', { where: 'send', message: err.message, body: item.body });
    }
  }
  await producer.close();
  emit('done', { reason: 'plan sent' });
}

async function push() {
  const consumer = new ons.Consumer(Object.assign(common(), {
    consumerGroup: opts.group,
    consumeFromWhere: opts['from-first'] ? 'CONSUME_FROM_FIRST_OFFSET' : 'CONSUME_FROM_LAST_OFFSET',
  }));
  // ali-ons reports a queue with no committed offset (and other recoverable events) as errors
  consumer.on('error', err => emit('error', { where: 'consumer', message: err.message }));
  const failFirst = new Set(opts['fail-first']);
  const failed = new Set();
  const acked = new Set();
  let lastAck = Date.now();
  consumer.subscribe(opts.topic, opts.expression, async msg => {
    const body = msg.body.toString();
    const fail = failFirst.has(body) && !failed.has(body);
    if (fail) failed.add(body);
    emit('received', {
      topic: msg.topic, queue: msg.queueId, queue_offset: Number(msg.queueOffset), body,
      tags: msg.tags || null, keys: msg.keys || null, properties: msg.properties,
      reconsume_times: msg.reconsumeTimes, msg_id: msg.msgId,
      status: fail ? 'RECONSUME_LATER' : 'CONSUME_SUCCESS', at_ms: Date.now(),
    });
    if (fail) return ons.Consumer.ACTION_RETRY;
    acked.add(body);
    lastAck = Date.now();
    return undefined;
  });
  await consumer.ready();
  emit('started', { mode: 'push', pid: process.pid, group: opts.group });
  const deadline = Date.now() + maxMs;
  let reason = 'timeout';
  while (Date.now() < deadline) {
    if (opts['stop-file'] && fs.existsSync(opts['stop-file'])) {
      reason = 'stop file';
      break;
    }
    if (expect !== null && acked.size >= expect && Date.now() - lastAck >= lingerMs) {
      reason = 'expected';
      break;
    }
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  await consumer.close();
  emit('done', { reason, acked: acked.size });
}

async function main() {
  if (!opts.namesrv || !opts.group) throw new Error('--namesrv and --group are required');
  if (mode === 'produce') {
    if (!opts.plan) throw new Error('--plan is required for produce');
    await produce();
  } else if (mode === 'push') {
    if (!opts.topic) throw new Error('--topic is required for push');
    await push();
  } else {
    throw new Error(`unknown mode ${mode}; use produce or push`);
  }
}

// A hard bound even if ali-ons hangs in close() or never becomes ready.
setTimeout(() => {
  emit('done', { reason: 'hard timeout' });
  process.exit(2);
}, maxMs + 15000).unref();

main().then(() => process.exit(0), err => {
  emit('error', { where: 'main', message: String(err && err.stack || err) });
  process.exit(1);
});
