// Splits each string of a JSON array with GPT-2's pattern exactly as
// gpt-3-encoder's Encoder.js has it (the regex is read from its source,
// not copied), printing a JSON array of arrays of pieces.
//   node gpt2_pretok.js NODE_MODULES_DIR CASES.json
const path = require('path');
const fs = require('fs');
const src = fs.readFileSync(
    path.join(process.argv[2], 'gpt-3-encoder', 'Encoder.js'), 'utf-8');
const m = src.match(/^const pat = (\/.*\/[a-z]*)$/m);
if (!m) {
  console.error('gpt2_pretok.js: no "const pat = /.../" in Encoder.js');
  process.exit(1);
}
const pat = eval(m[1]);
const cases = JSON.parse(fs.readFileSync(process.argv[3], 'utf-8'));
const out = cases.map(s => Array.from(s.matchAll(pat)).map(x => x[0]));
process.stdout.write(JSON.stringify(out) + '\n');
