'use strict';
// A RocketMQ 5 producer or consumer (Apache's Node.js client, rocketmq-client-nodejs) driven by
// JSON lines, for the interop tests. The same commands and answers as the Python 5.x driver
// (chaos/real_clients/py5/driver.py); durations on the wire are whole seconds (`invisible_s`,
// `await_s`, `delay_s`), turned into the milliseconds this client takes.
//
//   {"op": "start", "endpoints": "h:p;h:p", "topics": ["T"]}        -> {"event": "started", "seconds": s, "client_id": id}
//   {"op": "send", "topic": "T", "body": "..." (or "body_bytes": n), "tag": "t", "keys": ["k"],
//    "properties": {"p": "v"}, "group": "g", "delay_s": n}          -> {"event": "sent", "message_id": id, "queue_id": q,
//                                                                       "offset": o, "sent_at": t, "due": s}
//                                                                   or {"event": "send-failed", "error_type": cls, "error": text}
//   {"op": "consumer_start", "endpoints": "...", "kind": "push"|"simple", "group": "G", "topic": "T",
//    "tags": "*", "await_s": n, "fail_once": [...], "fail_always": [...], "slow": {"body": s}}
//                                                                   -> {"event": "started", "seconds": s, "client_id": id}
//   {"op": "receive", "max": n, "invisible_s": s}  (simple)         -> {"event": "received", "messages": [...], "seconds": s}
//                                                                   or {"event": "receive-failed", ...}
//   {"op": "ack", "ref": n}                                         -> {"event": "acked"} or {"event": "ack-failed", ...}
//   {"op": "change_invisible", "ref": n, "invisible_s": s}          -> {"event": "changed", "receipt_handle": h, "at": t}
//                                                                   or {"event": "change-failed", ...}
//   {"op": "consumed"}  (push)                                      -> {"event": "consumed", "messages": [...]}
//   {"op": "shutdown"}                                              -> {"event": "done"}, exit 0
//
// A received message's `ref` indexes the client's message object that `ack` and
// `change_invisible` act on. Commands run one at a time, in order. The client logs to
// $HOME/logs/rocketmq/rocketmq_client_nodejs.log: point HOME at a test's directory to keep it.
// stdout carries answers only.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const util = require('node:util');

const here = __dirname;
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult,
} = require(path.join(here, 'node_modules', 'rocketmq-client-nodejs'));

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

// The client's own logger (egg-logger) is closed by BaseClient.shutdown before the subclass logs
// its last line, which then prints a "log stream had been closed" error; this one has no close.
const logFile = path.join(os.homedir(), 'logs', 'rocketmq', 'rocketmq_client_nodejs.log');
fs.mkdirSync(path.dirname(logFile), { recursive: true });
function logAt(level) {
  return (...args) => {
    fs.appendFileSync(logFile, `${new Date().toISOString()} ${level} ${process.pid} ${util.format(...args)}\n`);
  };
}
const logger = { info: logAt('INFO'), warn: logAt('WARN'), error: logAt('ERROR'), debug: () => {} };

function now() {
  return Date.now() / 1000;
}

function failure(err) {
  const text = err && err.stack ? String(err.message) : String(err);
  const cause = err && err.cause ? ` (cause: ${err.cause.message || err.cause})` : '';
  return { error_type: (err && err.constructor && err.constructor.name) || typeof err,
    code: err && err.code, error: (text + cause).slice(0, 2000) };
}

function described(msg) {
  return {
    message_id: msg.messageId, body: msg.body.toString('utf8'), tag: msg.tag || null,
    keys: [ ...(msg.keys || []) ].sort(), properties: Object.fromEntries(msg.properties || []),
    delivery_attempt: msg.deliveryAttempt, message_group: msg.messageGroup || null,
    receipt_handle: msg.receiptHandle, at: now(),
  };
}

async function main() {
  let client = null;
  const consumed = [];
  const held = []; // received messages, by ref
  const failOnce = new Set();
  const failAlways = new Set();
  const slow = {};

  // A push consumer's listener: records each call from its start (result RUNNING until it answers).
  const listener = {
    async consume(message) {
      const seen = { ...described(message), result: 'RUNNING' };
      consumed.push(seen);
      if (slow[seen.body]) {
        await new Promise(resolve => setTimeout(resolve, slow[seen.body] * 1000));
      }
      let result = ConsumeResult.SUCCESS;
      if (failOnce.has(seen.body) || failAlways.has(seen.body)) {
        failOnce.delete(seen.body);
        result = ConsumeResult.FAILURE;
      }
      seen.result = result.name;
      return result;
    },
  };

  const ops = {
    async start(cmd) {
      client = new Producer({ endpoints: cmd.endpoints, namespace: '', topics: cmd.topics || [], logger,
        requestTimeout: (cmd.timeout_s || 3) * 1000 });
      const began = Date.now();
      await client.startup();
      emit('started', { seconds: (Date.now() - began) / 1000, client_id: client.clientId });
    },
    async send(cmd) {
      const options = {
        topic: cmd.topic,
        body: 'body' in cmd ? Buffer.from(cmd.body) : Buffer.alloc(Number(cmd.body_bytes), 'x'),
        keys: cmd.keys || [],
      };
      if (cmd.tag) options.tag = cmd.tag;
      if (cmd.properties) options.properties = new Map(Object.entries(cmd.properties));
      if (cmd.group) options.messageGroup = cmd.group;
      let due = null;
      if (cmd.delay_s !== undefined && cmd.delay_s !== null) {
        options.deliveryTimestamp = new Date(Date.now() + cmd.delay_s * 1000);
        due = options.deliveryTimestamp.getTime() / 1000;
      }
      let receipt;
      try {
        receipt = await client.send(options);
      } catch (err) { // the test judges what the client threw
        emit('send-failed', failure(err));
        return;
      }
      // the queue is the one the client picked; the broker picks its own (docs/protocol.md)
      emit('sent', { message_id: receipt.messageId, queue_id: receipt.messageQueue.queueId,
        offset: Number(receipt.offset), sent_at: now(), due });
    },
    async consumer_start(cmd) {
      const subscriptions = new Map([[ cmd.topic, cmd.tags || '*' ]]);
      const common = { endpoints: cmd.endpoints, namespace: '', consumerGroup: cmd.group, subscriptions, logger,
        requestTimeout: (cmd.timeout_s || 3) * 1000 };
      for (const body of cmd.fail_once || []) failOnce.add(body);
      for (const body of cmd.fail_always || []) failAlways.add(body);
      Object.assign(slow, cmd.slow || {});
      if (cmd.kind === 'push') {
        client = new PushConsumer({ ...common, messageListener: listener });
      } else {
        client = new SimpleConsumer({ ...common, awaitDuration: (cmd.await_s ?? 5) * 1000 });
      }
      const began = Date.now();
      await client.startup();
      emit('started', { seconds: (Date.now() - began) / 1000, client_id: client.clientId });
    },
    async receive(cmd) {
      const began = Date.now();
      let messages;
      try {
        messages = await client.receive(Number(cmd.max ?? 16), Number(cmd.invisible_s ?? 15) * 1000);
      } catch (err) {
        emit('receive-failed', failure(err));
        return;
      }
      const seconds = (Date.now() - began) / 1000;
      const out = messages.map(m => {
        held.push(m);
        return { ...described(m), ref: held.length - 1 };
      });
      emit('received', { messages: out, seconds });
    },
    async ack(cmd) {
      try {
        await client.ack(held[Number(cmd.ref)]);
      } catch (err) {
        emit('ack-failed', failure(err));
        return;
      }
      emit('acked');
    },
    async change_invisible(cmd) {
      const msg = held[Number(cmd.ref)];
      try {
        await client.changeInvisibleDuration(msg, Number(cmd.invisible_s) * 1000);
      } catch (err) {
        emit('change-failed', failure(err));
        return;
      }
      emit('changed', { receipt_handle: msg.receiptHandle, at: now() });
    },
    async consumed() {
      emit('consumed', { messages: consumed.slice() });
    },
  };

  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (err) {
      emit('error', { error: `not JSON: ${line.slice(0, 200)}` });
      continue;
    }
    const op = cmd.op;
    try {
      if (op === 'shutdown') break;
      if (!ops[op]) {
        emit('error', { error: `unknown op ${JSON.stringify(op)}` });
        continue;
      }
      if (op !== 'start' && op !== 'consumer_start' && !client) throw new Error('start first');
      await ops[op](cmd);
    } catch (err) {
      emit('error', { op, ...failure(err), trace: String(err && err.stack).slice(-3000) });
    }
  }
  if (client) await client.shutdown();
  emit('done');
  // grpc-js keeps no handle open after shutdown, but a lingering timer must not hold the exit
  process.exit(0);
}

main().catch(err => {
  emit('error', { op: 'main', ...failure(err) });
  process.exit(1);
});
