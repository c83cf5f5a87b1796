// docs/vectors/watches.json checked in JavaScript, as the SDK will derive
// watch keys (docs/FORMATS.md §9.3): canonical JSON by JSON.stringify with
// sorted members, SHA-256 from node:crypto. The server's own test checks the
// same file in Rust (service::product::watch_keys). Exits non-zero on any
// mismatch.
import fs from 'node:fs'; import crypto from 'node:crypto';
const v = JSON.parse(fs.readFileSync(new URL('../docs/vectors/watches.json', import.meta.url),'utf8'));
const canon = (x) => Array.isArray(x) ? '['+x.map(canon).join(',')+']'
  : (x !== null && typeof x === 'object') ? '{'+Object.keys(x).sort().map(k=>JSON.stringify(k)+':'+canon(x[k])).join(',')+'}'
  : JSON.stringify(x);
let bad = 0;
for (const c of v.canonical) { const got = canon(JSON.parse(c.json)); if (got !== c.canonical) { bad++; console.log('canon', c.json, got, c.canonical); } }
const epoch = Buffer.from(v.epoch,'hex');
const ptr = (obj, p) => { let cur = obj; for (const raw of p.split('/').slice(1)) { const k = raw.replace(/~1/g,'/').replace(/~0/g,'~'); if (cur === null || typeof cur !== 'object' || !(k in cur)) return undefined; cur = cur[k]; } return cur; };
for (const c of v.keys) {
  const def = canon({fields: c.watch.fields, name: c.watch.name});
  const id = crypto.createHash('sha256').update(Buffer.concat([Buffer.from('strata/watch-definition/v1\0'), epoch, Buffer.from(def)])).digest().subarray(0,16);
  const rec = JSON.parse(c.record); const vals = c.watch.fields.map(f=>ptr(rec,f));
  const key = vals.some(x=>x===undefined) ? null : crypto.createHash('sha256').update(Buffer.concat([Buffer.from('strata/watch-key/v1\0'), id, Buffer.from(canon(vals))])).digest().subarray(0,8).toString('hex');
  if (id.toString('hex') !== c.definitionId || key !== c.watchKey) { bad++; console.log('key', c.record, id.toString('hex'), key, c.watchKey); }
}
if (bad) { console.error(`watch vectors: ${bad} mismatches with JavaScript`); process.exit(1); }
console.log(`watch vectors: ${v.canonical.length + v.keys.length} agree with JavaScript`);
