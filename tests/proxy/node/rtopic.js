// The plugin README's example through `rtroute proxy`, as a Node user writes it against the
// x-rtopic plugin: declare, bind A-F, publish with confirms (plus a CC and a real BCC), then
// print every queue's deliveries as JSON: {queue: [[body, exchange, routingKey, headers]]}.
// usage: node rtopic.js AMQP_URL EXCHANGE
const amqp = require('amqplib');

const BINDINGS = {
  A: 'server1.app1.mod1.info', B: 'server1.app1.mod1.error', C: 'server1.app2.mod1.info',
  D: 'server2.app2.mod1.warning', E: 'server1.app1.mod2.info', F: 'server2.app1.mod1.info',
};
const KEYS = ['server1.app1.mod1.info', '*.app1.mod1.info', '#.info', '#.mod1.info', '#',
  'server1.app1.mod1.*', 'server1.app1.#'];

async function main() {
  const [url, name] = process.argv.slice(2);
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  await ch.assertExchange(name, 'x-rtopic', { durable: true });
  for (const [q, key] of Object.entries(BINDINGS)) {
    await ch.assertQueue(`${name}.${q}`, { exclusive: true });
    await ch.bindQueue(`${name}.${q}`, name, key);
  }
  KEYS.forEach((key, i) => ch.publish(name, key, Buffer.from(String(i))));
  ch.publish(name, 'nothing.matches', Buffer.from('cc'),
    { headers: { CC: ['server2.app2.mod1.warning'], BCC: ['#.error'] } });
  await ch.waitForConfirms();
  const out = {};
  for (const q of Object.keys(BINDINGS)) {
    out[q] = [];
    for (;;) {
      const m = await ch.get(`${name}.${q}`, { noAck: true });
      if (!m) break;
      out[q].push([m.content.toString(), m.fields.exchange, m.fields.routingKey,
        m.properties.headers || {}]);
    }
  }
  await ch.deleteExchange(name);
  process.stdout.write(JSON.stringify(out));
  await conn.close();
}

main().catch((err) => { console.error(err); process.exit(1); });
