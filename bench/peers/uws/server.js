// A WebSocket pub/sub server on uWebSockets.js, the raw ceiling for bench/compare --peers uws;
// the wire loadgen --protocol raw speaks (loadgen/src/raw.rs). A subscriber upgrades on /TOPIC
// and is greeted {"subscribed":TOPIC}; the publisher upgrades on /TOPIC?publish, sends rows one
// per line in one message, and each row goes to TOPIC as its own message, then {"ok":N} back.
// A subscriber more than 16 MiB behind is closed (never skipped: loadgen would count the gap).
//   node server.js [PORT]   (prints "listening on 127.0.0.1:PORT"; 0 or none: any free port)
import { App, us_socket_local_port } from 'uws-pack';

const app = App().ws('/*', {
  maxPayloadLength: 16 << 20, maxBackpressure: 16 << 20, closeOnBackpressureLimit: true, idleTimeout: 0,
  upgrade: (res, req, ctx) => res.upgrade({ topic: req.getUrl().slice(1), pub: req.getQuery() === 'publish' },
    req.getHeader('sec-websocket-key'), req.getHeader('sec-websocket-protocol'), req.getHeader('sec-websocket-extensions'), ctx),
  open: (ws) => { const u = ws.getUserData(); if (!u.pub) ws.subscribe(u.topic); ws.send(JSON.stringify(u.pub ? { publisher: u.topic } : { subscribed: u.topic })); },
  message: (ws, msg) => {
    const b = Buffer.from(msg), topic = ws.getUserData().topic;
    let n = 0;
    for (let s = 0, i; s < b.length; s = i + 1, n++) { i = b.indexOf(10, s); if (i < 0) i = b.length; app.publish(topic, b.subarray(s, i)); }
    ws.send(`{"ok":${n}}`);
  },
}).listen('127.0.0.1', +(process.argv[2] || 0), (ls) => {
  if (!ls) { console.error('uws: could not listen'); process.exit(1); }
  console.log(`listening on 127.0.0.1:${us_socket_local_port(ls)}`);
});
