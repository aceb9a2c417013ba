// The parity scenario's steps as a Node user writes them with amqplib (see ../parity.py):
// prints {step: observation} as JSON, the exchange name replaced by NAME.
// usage: node parity.js AMQP_URL
const amqp = require('amqplib');

const BINDINGS = {
  A: 'server1.app1.mod1.info', B: 'server1.app1.mod1.error', C: 'server1.app2.mod1.info',
  D: 'server2.app2.mod1.warning', E: 'server1.app1.mod2.info', F: 'server2.app1.mod1.info',
};
const KEYS = ['server1.app1.mod1.info', '*.app1.mod1.info', '#.info', '#.mod1.info', '#',
  'server1.app1.mod1.*', 'server1.app1.#'];

function refusal(err) {
  return { 'channel closed': [err.code || null, String(err.message).replace(/^.*?: /, '')] };
}

async function main() {
  const [url] = process.argv.slice(2);
  const name = `parity-node-${Math.random().toString(16).slice(2, 10)}`;
  const conn = await amqp.connect(url);
  conn.on('error', () => {});
  const out = {};
  const ch = await conn.createConfirmChannel();
  await ch.assertExchange(name, 'x-rtopic', { durable: false });
  for (const [q, key] of Object.entries(BINDINGS)) {
    await ch.assertQueue(`${name}.${q}`, { exclusive: true });
    await ch.bindQueue(`${name}.${q}`, name, key);
  }
  const drain = async (queue) => {
    const got = [];
    for (;;) {
      const m = await ch.get(queue, { noAck: true });
      if (!m) return got;
      got.push([m.content.toString(), m.fields.exchange, m.fields.routingKey,
        m.properties.headers === undefined ? null : m.properties.headers]);
    }
  };
  const drainAll = async () => {
    const all = {};
    for (const q of Object.keys(BINDINGS)) all[q] = await drain(`${name}.${q}`);
    return all;
  };
  const confirmed = (channel, exchange, key, content, options = {}) => new Promise((resolve) => {
    channel.publish(exchange, key, content, options, (err) => resolve(err ? 'nacked' : 'confirmed'));
  });
  const failing = async (run) => {
    const other = await conn.createConfirmChannel();
    const closed = new Promise((resolve) => other.on('error', (err) => resolve(refusal(err))));
    try {
      const result = await Promise.race([run(other), closed]);
      if (typeof result === 'object') return result;
      return await Promise.race([closed, new Promise((r) => setTimeout(() => r(result), 500))]);
    } catch (err) {
      return await closed;
    }
  };

  for (const key of KEYS) await confirmed(ch, name, key, Buffer.from(String(KEYS.indexOf(key))));
  out.table = await drainAll();
  await confirmed(ch, name, 'nothing.matches', Buffer.from('cc'),
    { headers: { CC: ['server2.app2.mod1.warning'], BCC: ['#.error'] } });
  out.cc_bcc = await drainAll();
  await confirmed(ch, name, '*.app1.mod1.info', Buffer.from('props'),
    { contentType: 'text/plain', correlationId: 'c-1', headers: { 'x-str': 's', 'x-int': 7 } });
  out.properties = await drainAll();
  const returned = [];
  ch.on('return', (m) => returned.push([m.fields.exchange, m.fields.routingKey,
    m.fields.replyCode, m.fields.replyText]));
  const mandatory = await confirmed(ch, name, 'no.match.here', Buffer.from('m'),
    { mandatory: true });
  out.mandatory_unroutable = { confirm: mandatory, returned };
  out.redeclare_over_topic = await failing(async (other) => {
    await other.assertExchange(`${name}.topic`, 'topic', { autoDelete: true });
    await other.assertExchange(`${name}.topic`, 'x-rtopic', { autoDelete: true });
    return 'declared';
  });
  out.passive_missing = await failing(async (other) => {
    await other.checkExchange(`${name}.missing`);
    return 'declared';
  });
  out.cc_not_an_array = await failing(async (other) => {
    other.publish(name, 'server1.app1.mod1.info', Buffer.from('bad'), { headers: { CC: 'a.b' } });
    await other.waitForConfirms();
    return 'confirmed';
  });
  out.internal = await failing(async (other) => {
    await other.assertExchange(`${name}.internal`, 'x-rtopic', { internal: true, autoDelete: true });
    const q = (await other.assertQueue('', { exclusive: true })).queue;
    await other.bindQueue(q, `${name}.internal`, 'a.b');
    other.publish(`${name}.internal`, 'a.b', Buffer.from('x'));
    await other.waitForConfirms();
    return 'confirmed';
  });
  await ch.deleteExchange(name);
  await conn.close();
  process.stdout.write(JSON.stringify(out).split(name).join('NAME'));
}

main().catch((err) => { console.error(err); process.exit(1); });
