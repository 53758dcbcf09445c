// Prints the GPT-2 ids that OpenAI's encoder (the gpt-3-encoder package)
// gives for a file's text, space-separated on one line.
//   node gpt2_encode.js NODE_MODULES_DIR FILE
const path = require('path');
const fs = require('fs');
const { encode } = require(path.resolve(process.argv[2], 'gpt-3-encoder'));
const text = fs.readFileSync(process.argv[3], 'utf-8');
process.stdout.write(encode(text).join(' ') + '\n');
