// A plugin user's Node client during the move to RabbitMQ 4.3 (tests/proxy/test_migration_rehearsal.py):
// it runs until SIGTERM, and moving it is restarting it with another port, as an operator does.
//   node migrating_client.js publish URL EXCHANGE CLIENT FIRST_SEQ KEYS_JSON
//     publishes CLIENT-SEQ (key KEYS[SEQ % KEYS.length]) one at a time with confirms; on SIGTERM
//     it stops between two publishes and prints {"next": SEQ} (every SEQ below it confirmed)
//   node migrating_client.js consume URL QUEUE...
//     prints "QUEUE BODY" per delivery, then acks it; on SIGTERM it cancels its consumers,
//     lets the handler in progress finish and closes
const amqp = require('amqplib');

let stopping = false;
process.on('SIGTERM', () => { stopping = true; });
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function publish(url, exchange, client, first, keys) {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  let seq = first;
  while (!stopping) {
    ch.publish(exchange, keys[seq % keys.length], Buffer.from(`${client}-${seq}`));
    await ch.waitForConfirms();
    seq += 1;
    await pause(5);
  }
  await conn.close();
  process.stdout.write(JSON.stringify({ next: seq }));
}

async function consume(url, queues) {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.prefetch(10);
  const tags = [];
  for (const queue of queues) {
    const { consumerTag } = await ch.consume(queue, (m) => {
      process.stdout.write(`${queue} ${m.content.toString()}\n`);
      ch.ack(m);
    });
    tags.push(consumerTag);
  }
  while (!stopping) await pause(20);
  for (const tag of tags) await ch.cancel(tag);
  await pause(100);
  await conn.close();
}

const [mode, url, ...rest] = process.argv.slice(2);
const run = mode === 'publish'
  ? publish(url, rest[0], rest[1], Number(rest[2]), JSON.parse(rest[3]))
  : consume(url, rest);
run.catch((err) => { console.error(err); process.exit(1); });
