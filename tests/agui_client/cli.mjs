// node cli.mjs '<json options>': runs conversation() (conversation.mjs) and prints its JSON.
// Options: url, token (sent as Authorization: Bearer), threadId, first, second, clientTool, answer.
import { conversation } from "./conversation.mjs";

const opts = JSON.parse(process.argv[2]);
const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
const out = await conversation({ ...opts, headers });
process.stdout.write(JSON.stringify(out));
