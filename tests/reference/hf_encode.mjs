// Encodes a file's text with Hugging Face's own tokenizers.js loading a
// tokenizer.json, prints the ids space-separated on one line, and checks
// that decoding them gives the text back (exit 1 if not).
//   node hf_encode.mjs NODE_MODULES_DIR TOKENIZER.json FILE
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';
const [dir, tokPath, file] = process.argv.slice(2);
const mod = path.join(dir, '@huggingface', 'tokenizers', 'dist',
                      'tokenizers.mjs');
const { Tokenizer } = await import(pathToFileURL(mod).href);
const json = JSON.parse(fs.readFileSync(tokPath, 'utf-8'));
// No clean-up of spaces on decode: that would change the text.
const tok = new Tokenizer(json, { clean_up_tokenization_spaces: false });
const text = fs.readFileSync(file, 'utf-8');
const ids = tok.encode(text).ids;
process.stdout.write(ids.join(' ') + '\n');
if (ids.length && tok.decode(ids) !== text) {
  console.error('hf_encode.mjs: decode(encode(text)) differs from the text');
  process.exit(1);
}
