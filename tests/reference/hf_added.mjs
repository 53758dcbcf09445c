// Encodes a file's text with Hugging Face's tokenizers.js loading a
// tokenizer.json and prints the ids space-separated on one line; writes
// decode(ids, skip_special_tokens) to DECODED. Unlike hf_encode.mjs it
// does not ask decode(encode(text)) == text: lstrip and rstrip drop
// whitespace.
//   node hf_added.mjs NODE_MODULES_DIR TOKENIZER.json FILE DECODED
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';
const [dir, tokPath, file, decPath] = process.argv.slice(2);
const mod = path.join(dir, '@huggingface', 'tokenizers', 'dist',
                      'tokenizers.mjs');
const { Tokenizer } = await import(pathToFileURL(mod).href);
const json = JSON.parse(fs.readFileSync(tokPath, 'utf-8'));
const tok = new Tokenizer(json, { clean_up_tokenization_spaces: false });
const ids = tok.encode(fs.readFileSync(file, 'utf-8')).ids;
process.stdout.write(ids.join(' ') + '\n');
fs.writeFileSync(decPath, ids.length ?
                 tok.decode(ids, { skip_special_tokens: true }) : '');
