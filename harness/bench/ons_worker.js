'use strict';
// ali-ons 3.12.0 (a RocketMQ 4.x client written in JavaScript) as a benchmark worker:
//   node harness/bench/ons_worker.js '<job json>'
//
// The measured client is ali-ons as installed (the job's "modules" dir), talking RocketMQ's 4.x
// remoting protocol to the name server's loopback remoting address. This script adds only the
// benchmark's line protocol (harness/bench/worker_protocol.py): `READY` once set up, wait for `GO`
// on stdin, count completions in `windows` back-to-back windows of `seconds` from GO, print
// `RESULT {json}` and exit; `ERROR <text>` and exit 1 on any failure; exit at once when stdin
// closes. Roles:
//
//   send  one Producer, `await producer.send(msg)` one message at a time (ali-ons has only send:
//         no batch, no oneway)
//   push  a Consumer (ali-ons' defaults: pull batch 32, one message consumed at a time per queue)
//         of a new group from the first offset, its handler reading each message's body, topic,
//         queue offset and properties; counts from the first delivery to `expected`
//
// cpu_s is the process's user + system CPU over the windows (push: from GO).

const path = require('path');
const fs = require('fs');

const job = JSON.parse(process.argv[2] || 'null');

function emit(line) {
  process.stdout.write(line + '\n');
}

function fail(err) {
  emit(`ERROR ${String(err && err.stack || err).replace(/\n/g, ' ')}`);
  process.exit(1);
}

if (!job) fail(new Error("usage: node ons_worker.js '<job json>'"));
fs.mkdirSync(job.home, { recursive: true });
process.env.HOME = job.home; // ali-ons keeps local files under HOME

let ons;
try {
  ons = require(path.join(job.modules, 'ali-ons'));
} catch (err) {
  fail(new Error(`ali-ons 3.12.0 is not installed under ${job.modules} (${err.message}): run ./scripts/bootstrap.sh`));
}

// ali-ons asserts an http client even with nameSrv set; with nameSrv it never looks anything up
// over HTTP, so this one fails loudly if it ever is asked to.
const httpclient = {
  async request(url) {
    throw new Error(`no HTTP name-server lookups in the benchmark (${url})`);
  },
};
const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};
const common = { httpclient, logger, nameSrv: job.namesrv, clientIP: '127.0.0.1' };

function nowS() {
  return Number(process.hrtime.bigint()) / 1e9; // CLOCK_MONOTONIC
}

function cpuS() {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1e6;
}

// Resolves on GO; the process exits when stdin closes (before GO or after it).
function awaitGo() {
  return new Promise(resolve => {
    let buffered = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', chunk => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop();
      for (const line of lines) {
        if (line.trim() === 'GO') resolve();
        else process.exit(3);
      }
    });
    process.stdin.on('end', () => process.exit(3));
  });
}

class Windows {
  constructor(seconds, count) {
    this.start = nowS();
    this.seconds = seconds;
    this.messages = new Array(count).fill(0);
    this.end = this.start + seconds * count;
    this.cpuStart = cpuS();
    this.cpu = null;
  }

  isOpen() {
    return nowS() < this.end;
  }

  add(count) {
    const index = Math.floor((nowS() - this.start) / this.seconds);
    if (index >= 0 && index < this.messages.length) this.messages[index] += count;
  }

  close() {
    if (this.cpu === null) this.cpu = cpuS() - this.cpuStart;
  }
}

function result(windows, windowSeconds, errors, cpu, extra) {
  return Object.assign({ windows, window_seconds: windowSeconds, errors, cpu_s: cpu }, extra || {});
}

async function runSend() {
  const producer = opened(new ons.Producer(Object.assign({ producerGroup: job.group }, common)));
  producer.on('error', err => console.error('producer error:', String(err && err.message).slice(0, 300)));
  await producer.ready();
  const body = Buffer.alloc(job.body_bytes, 'b');
  const samples = [];
  let errors = 0;
  await producer.send(new ons.Message(job.topic, body)); // warm up: route, connection
  emit('READY');
  await awaitGo();
  const windows = new Windows(job.seconds, job.windows);
  while (windows.isOpen()) {
    try {
      const sent = await producer.send(new ons.Message(job.topic, body));
      if (sent.sendStatus !== 'SEND_OK') throw new Error(`send status ${sent.sendStatus}`);
      windows.add(1);
    } catch (err) {
      errors += 1;
      if (samples.length < 5) samples.push(String(err && err.message).slice(0, 300));
    }
  }
  windows.close();
  return result(windows.messages, windows.seconds, errors, windows.cpu, { error_samples: samples });
}

async function runPush() {
  emit('READY');
  await awaitGo();
  const start = nowS();
  const cpuStart = cpuS();
  let messages = 0;
  let first = 0;
  let last = 0;
  let touched = 0;
  let finished;
  const done = new Promise(resolve => { finished = resolve; });
  const consumer = opened(new ons.Consumer(Object.assign({
    consumerGroup: job.group, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  }, common)));
  // a queue with no committed offset and other recoverable events arrive as 'error' events
  consumer.on('error', err => console.error('consumer error:', String(err && err.message).slice(0, 300)));
  consumer.subscribe(job.topic, '*', async msg => {
    touched += msg.body.length + msg.topic.length + Number(msg.queueOffset) + Object.keys(msg.properties || {}).length;
    const now = nowS();
    if (!messages) first = now;
    messages += 1;
    last = now;
    if (messages >= job.expected) finished();
  });
  await Promise.race([done, new Promise(resolve => setTimeout(resolve, job.seconds * 1000))]);
  const cpu = cpuS() - cpuStart; // start-up and rebalance included: small next to the rest
  const counted = messages;
  if (!counted) return result([0], nowS() - start, 1, null, { error_samples: ['no message arrived'] });
  return result([counted], last - first, 0, cpu, { started_after_s: first - start, touched });
}

// The clients this process started, closed after the RESULT is out (close() persists offsets and
// unregisters), bounded: a client stuck in it must not hold the process up.
const clients = [];

function opened(client) {
  clients.push(client);
  return client;
}

function closeAll() {
  const closing = clients.map(client => Promise.resolve().then(() => client.close()).catch(() => {}));
  return Promise.race([Promise.all(closing), new Promise(resolve => setTimeout(resolve, 3000))]);
}

const ROLES = { send: runSend, push: runPush };

async function main() {
  const role = ROLES[job.role];
  if (!role) throw new Error(`unknown role ${job.role}: ons workers run ${Object.keys(ROLES).join(', ')}`);
  const outcome = await role();
  emit('RESULT ' + JSON.stringify(outcome));
}

main().then(() => closeAll().then(() => process.exit(0)), fail);
