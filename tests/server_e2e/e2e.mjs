// End-to-end test of `sluice serve`: the official OpenAI Node.js SDK and raw HTTP
// against a real server on a loopback port. Run by tests/server_e2e_test.cpp,
// which passes, in the environment:
//   SLUICE_BINARY    the sluice executable
//   SLUICE_MODEL     stories260K.gguf
//   SLUICE_TEMPLATE  a chat template file (the model has none)
//   SLUICE_REF_FILE  a file holding `sluice run --json --temp 0 -p "Once upon a time" -n N` output
//   SLUICE_README    readme_examples.sh, run against the live server
// Prints "E2E PASSED <n> checks" and exits 0, or prints the failure and exits 1.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const BIN = process.env.SLUICE_BINARY;
const MODEL_PATH = process.env.SLUICE_MODEL;
const TEMPLATE = process.env.SLUICE_TEMPLATE;
const REF = JSON.parse(readFileSync(process.env.SLUICE_REF_FILE, 'utf8'));
const README = process.env.SLUICE_README;
const KEY = 'sk-sluice-e2e';
const PROMPT = 'Once upon a time';

let checks = 0;
function check(cond, what) {
  assert.ok(cond, what);
  checks++;
}
function checkEqual(actual, expected, what) {
  assert.deepStrictEqual(actual, expected, what);
  checks++;
}

// The whole run is bounded; a hang is a failure, never a pass.
const overall = setTimeout(() => {
  console.error('FAIL: e2e test exceeded 300 s');
  process.exit(1);
}, 300_000);

const servers = [];
async function startServer(extraArgs) {
  const proc = spawn(BIN, ['serve', '-m', MODEL_PATH, '--host', '127.0.0.1', '--port', '0', ...extraArgs], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const s = { proc, stderr: '', exited: null };
  servers.push(s);
  proc.stderr.on('data', (d) => { s.stderr += d.toString(); });
  s.exitPromise = new Promise((resolve) => proc.on('exit', (code, signal) => { s.exited = { code, signal }; resolve(s.exited); }));
  const t0 = Date.now();
  while (!/listening on http:\/\/127\.0\.0\.1:(\d+)/.test(s.stderr)) {
    if (s.exited || Date.now() - t0 > 30_000) throw new Error(`server did not start: ${s.stderr}`);
    await sleep(20);
  }
  s.port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr)[1]);
  s.url = `http://127.0.0.1:${s.port}`;
  while (true) {
    const h = await raw(s, 'GET', '/health').catch(() => null);
    if (h && h.status === 200) break;
    if (h) check(h.status === 503 && h.json.status === 'loading', `/health before ready: ${h.status} ${h.text}`);
    if (s.exited || Date.now() - t0 > 60_000) throw new Error(`server never became healthy: ${s.stderr}`);
    await sleep(50);
  }
  return s;
}

async function stopServer(s, signal = 'SIGTERM') {
  s.proc.kill(signal);
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), 40_000);
  const r = await s.exitPromise;
  clearTimeout(timer);
  return r;
}

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// One HTTP request; resolves with status, headers, text and parsed JSON (if any).
function raw(s, method, path, { body, headers = {}, auth = KEY, timeoutMs = 60_000 } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (auth) h.authorization = `Bearer ${auth}`;
    if (body !== undefined) {
      h['content-type'] = h['content-type'] || 'application/json';
      h['content-length'] = Buffer.byteLength(body);
    }
    const req = http.request({ host: '127.0.0.1', port: s.port, method, path, headers: h, timeout: timeoutMs }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

function post(s, path, obj, opts = {}) { return raw(s, 'POST', path, { body: JSON.stringify(obj), ...opts }); }

// Prometheus text -> Map("name{labels}" -> number).
async function metrics(s) {
  const r = await raw(s, 'GET', '/metrics', { auth: null });
  check(r.status === 200, `/metrics status ${r.status}`);
  const m = new Map();
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}
const metric = (m, k) => m.get(k) ?? 0;
const served = (endpoint, outcome) => `sluice_server_requests_total{endpoint="${endpoint}",outcome="${outcome}"}`;

// Waits until the engine is idle: nothing running or waiting, no stream open.
async function waitIdle(s) {
  const t0 = Date.now();
  while (true) {
    const m = await metrics(s);
    if (metric(m, 'sluice_requests_running') === 0 && metric(m, 'sluice_requests_waiting') === 0 &&
        metric(m, 'sluice_server_http_in_flight') === 0) return m;
    if (Date.now() - t0 > 30_000) throw new Error('engine did not become idle');
    await sleep(50);
  }
}

function expectError(r, status, code, what) {
  check(r.status === status, `${what}: status ${r.status}, want ${status}: ${r.text}`);
  check(r.json && r.json.error && typeof r.json.error.message === 'string' && r.json.error.message.length > 0,
    `${what}: OpenAI error body: ${r.text}`);
  if (code) check(r.json.error.code === code, `${what}: code ${r.json.error.code}, want ${code}`);
}

async function main() {
  const refTokens = REF.tokens;
  const refText = REF.text;
  const main = await startServer(['--api-key', KEY, '--chat-template', TEMPLATE, '--max-body-bytes', '65536',
    '--stream-keepalive', '0.2']);
  const client = new OpenAI({ apiKey: KEY, baseURL: `${main.url}/v1`, maxRetries: 0, timeout: 120_000 });

  // --- the start-up line names the architecture, the tokenizer and its
  // pre-tokenizer (SentencePiece here), the chat template and the tool-call format
  for (const t0 = Date.now(); !/\] ready: .*\n/.test(main.stderr) && Date.now() - t0 < 10_000;) await sleep(20);
  const ready = (/\] ready: (.*)\n/.exec(main.stderr) || [])[1] || '';
  check(ready.includes(`chat template: ${TEMPLATE}`), `ready line names the chat template: ${ready}`);
  check(/tool calls: [a-z0-9]+/.test(ready), `ready line names the tool-call format: ${ready}`);
  check(ready.includes('arch llama'), `ready line names the architecture: ${ready}`);
  check(ready.includes('tokenizer llama (SentencePiece)'), `ready line names the tokenizer: ${ready}`);

  // --- models, health, metrics baseline
  const models = await client.models.list();
  const modelId = models.data[0].id;
  check(models.data.length === 1 && typeof modelId === 'string', 'one model listed');
  checkEqual((await client.models.retrieve(modelId)).id, modelId, 'models.retrieve');
  const base = await waitIdle(main);
  const kvBase = metric(base, 'sluice_kv_blocks_used');
  check(metric(base, 'sluice_kv_blocks_total') > 0, 'kv blocks total published');

  // --- greedy completion == `sluice run` (token ids and text)
  const greedy = { model: modelId, prompt: PROMPT, max_tokens: refTokens.length, temperature: 0 };
  const c1 = await client.completions.create({ ...greedy, return_token_ids: true });
  checkEqual(c1.choices[0].token_ids, refTokens, 'greedy completion token ids == sluice run');
  checkEqual(c1.choices[0].text, refText, 'greedy completion text == sluice run');
  check(c1.object === 'text_completion' && c1.choices[0].finish_reason === 'length', 'completion object/finish');
  checkEqual(c1.usage.completion_tokens, refTokens.length, 'usage.completion_tokens');
  check(c1.usage.prompt_tokens > 0 && c1.usage.total_tokens === c1.usage.prompt_tokens + refTokens.length, 'usage totals');

  // --- streaming completion: same text, [DONE]-terminated, usage in the last chunk
  let streamed = '';
  let finish = null;
  let usageChunk = null;
  let nChunks = 0;
  const stream = await client.completions.create({ ...greedy, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    nChunks++;
    if (chunk.usage) usageChunk = chunk;
    for (const ch of chunk.choices) {
      streamed += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  checkEqual(streamed, refText, 'streamed completion text == sluice run');
  check(finish === 'length' && nChunks > 2, `stream finish ${finish}, ${nChunks} chunks`);
  check(usageChunk && usageChunk.choices.length === 0 && usageChunk.usage.completion_tokens === refTokens.length,
    'usage chunk at the end of the stream');

  // Raw SSE framing: every event is "data: ...", the last is [DONE].
  const sse = await post(main, '/v1/completions', { ...greedy, max_tokens: 8, stream: true });
  check(sse.status === 200 && sse.headers['content-type'].startsWith('text/event-stream'), 'SSE content type');
  const events = sse.text.split('\n\n').filter((e) => e && !e.startsWith(':'));
  check(events.every((e) => e.startsWith('data: ')), 'every SSE event is a data line');
  checkEqual(events[events.length - 1], 'data: [DONE]', 'stream ends with data: [DONE]');

  // --- chat, non-streaming and streaming agree (greedy)
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me a story.' }];
  const chat = await client.chat.completions.create({ model: modelId, messages, max_tokens: 24, temperature: 0 });
  check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant', 'chat object');
  check(typeof chat.choices[0].message.content === 'string' && chat.choices[0].message.content.length > 0, 'chat content');
  check(['stop', 'length'].includes(chat.choices[0].finish_reason), 'chat finish reason');
  check(chat.usage.prompt_tokens > 10, 'chat prompt includes the template');
  let chatStreamed = '';
  let sawRole = false;
  let chatUsage = null;
  const chatStream = await client.chat.completions.create({ model: modelId, messages, max_tokens: 24, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  for await (const chunk of chatStream) {
    if (chunk.usage) chatUsage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role === 'assistant') sawRole = true;
      chatStreamed += ch.delta.content ?? '';
    }
  }
  checkEqual(chatStreamed, chat.choices[0].message.content, 'streamed chat == non-streamed chat');
  check(sawRole, 'first chat delta carries the role');
  checkEqual(chatUsage, chat.usage, 'chat usage in the last stream chunk');

  // --- n, seed, stop, penalties, logprobs
  const sampled = { model: modelId, prompt: PROMPT, max_tokens: 16, temperature: 1.0, top_p: 0.9, n: 3, seed: 42 };
  const s1 = await client.completions.create(sampled);
  const s2 = await client.completions.create(sampled);
  checkEqual(s1.choices.map((c) => c.index).sort(), [0, 1, 2], 'n=3 gives three choices');
  checkEqual(s1.choices.map((c) => c.text), s2.choices.map((c) => c.text), 'same seed, same samples');
  const stopWord = ' girl';
  check(refText.includes(stopWord), 'reference text contains the stop word');
  const st = await client.completions.create({ ...greedy, stop: [stopWord] });
  checkEqual(st.choices[0].text, refText.slice(0, refText.indexOf(stopWord)), 'stop string cuts the text before it');
  checkEqual(st.choices[0].finish_reason, 'stop', 'stop string finish reason');
  const pen = await client.completions.create({ ...greedy, presence_penalty: 2, frequency_penalty: 2 });
  check(pen.choices[0].text !== refText, 'penalties change the greedy text');
  const lp = await client.completions.create({ ...greedy, max_tokens: 6, logprobs: 3 });
  check(lp.choices[0].logprobs.tokens.length === 6 && lp.choices[0].logprobs.token_logprobs.every((x) => x <= 0),
    'completion logprobs');
  check(lp.choices[0].logprobs.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 3),
    'completion top_logprobs');
  const clp = await client.chat.completions.create({ model: modelId, messages, max_tokens: 4, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  check(clp.choices[0].logprobs.content.length === 4 && clp.choices[0].logprobs.content[0].top_logprobs.length === 2,
    'chat logprobs');

  // --- the SDK sees OpenAI errors as its typed exceptions
  await assert.rejects(client.completions.create({ ...greedy, model: 'no-such-model' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  const badClient = new OpenAI({ apiKey: 'wrong', baseURL: `${main.url}/v1`, maxRetries: 0 });
  await assert.rejects(badClient.completions.create(greedy), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(client.completions.create({ ...greedy, max_tokens: 1_000_000_000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  checks += 3;

  // --- hostile input over raw HTTP: each gets its status and an OpenAI error body
  const before = await metrics(main);
  expectError(await raw(main, 'POST', '/v1/completions', { body: '{"model": "x", "prompt": ' }), 400, 'invalid_json', 'malformed JSON');
  expectError(await raw(main, 'POST', '/v1/completions', { body: '' }), 400, 'invalid_json', 'empty body');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'x', max_tokens: 'ten' }), 400, 'invalid_type', 'wrong type');
  expectError(await post(main, '/v1/chat/completions', { model: modelId, messages: 'hi' }), 400, 'invalid_type', 'messages not an array');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'x', temperature: -1 }), 400, 'invalid_value', 'out of range');
  expectError(await post(main, '/v1/completions', { model: 'gpt-4o', prompt: 'x' }), 404, 'model_not_found', 'unknown model');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'Once upon a time '.repeat(800) }), 400,
    'context_length_exceeded', 'prompt longer than the context');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'x', max_tokens: 1e9 }), 400,
    'context_length_exceeded', 'absurd max_tokens');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'x', max_tokens: 1e15 }), 400,
    'invalid_value', 'max_tokens beyond any int');
  expectError(await post(main, '/v1/completions', { model: modelId, prompt: 'x'.repeat(100_000) }), 413,
    'request_too_large', 'oversized body');
  expectError(await post(main, '/v1/completions', greedy, { auth: null }), 401, 'invalid_api_key', 'missing API key');
  expectError(await post(main, '/v1/completions', greedy, { auth: 'sk-wrong' }), 401, 'invalid_api_key', 'invalid API key');
  expectError(await raw(main, 'GET', '/v1/models', { auth: null }), 401, 'invalid_api_key', 'models without key');
  expectError(await raw(main, 'GET', '/v1/nothing-here'), 404, 'unknown_url', 'unknown route');
  const chatNoAlt = await post(main, '/v1/chat/completions', { model: modelId, messages: [{ role: 'user', content: [{ type: 'image_url' }] }] });
  expectError(chatNoAlt, 400, 'invalid_value', 'image content part');
  const after = await metrics(main);
  check(metric(after, served('completions', 'invalid_request')) - metric(before, served('completions', 'invalid_request')) === 7,
    'invalid requests counted by outcome');
  check(metric(after, served('completions', 'unauthorized')) - metric(before, served('completions', 'unauthorized')) === 2,
    'unauthorized requests counted');
  check(metric(after, served('completions', 'too_large')) - metric(before, served('completions', 'too_large')) === 1,
    'oversized requests counted');
  // ... and the server still answers correctly.
  const again = await client.completions.create({ ...greedy, return_token_ids: true });
  checkEqual(again.choices[0].token_ids, refTokens, 'after hostile input: still token-identical to sluice run');

  // --- a client that disconnects mid-stream cancels its request and frees its KV blocks
  const cancelledBefore = metric(await metrics(main), served('completions', 'cancelled'));
  await new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: modelId, prompt: PROMPT, max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true });
    const req = http.request({ host: '127.0.0.1', port: main.port, method: 'POST', path: '/v1/completions',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: `Bearer ${KEY}` } },
    (res) => {
      res.once('data', () => { req.destroy(); resolve(); });
    });
    req.on('error', (e) => { if (e.code !== 'ECONNRESET') reject(e); });
    req.setTimeout(30_000, () => reject(new Error('no first chunk')));
    req.end(body);
  });
  const idle = await waitIdle(main);
  check(metric(idle, served('completions', 'cancelled')) === cancelledBefore + 1, 'disconnect counted as cancelled');
  checkEqual(metric(idle, 'sluice_kv_blocks_used'), kvBase, 'KV blocks back to baseline after disconnect');
  check(metric(idle, 'sluice_requests_total{outcome="abort"}') >= 1, 'engine aborted the request');

  // --- a concurrent burst: 64 requests, mixed; nothing lost, nothing leaked
  const okBefore = metric(await metrics(main), served('completions', 'ok')) + metric(await metrics(main), served('chat.completions', 'ok'));
  const burst = [];
  for (let i = 0; i < 64; i++) {
    const kind = i % 4;
    if (kind === 0) {
      burst.push(client.completions.create({ ...greedy, max_tokens: 24, return_token_ids: true })
        .then((r) => checkEqual(r.choices[0].token_ids, refTokens.slice(0, 24), `burst ${i}: batched greedy == sluice run`)));
    } else if (kind === 1) {
      burst.push((async () => {
        let text = '';
        for await (const ch of await client.completions.create({ ...greedy, max_tokens: 24, stream: true })) text += ch.choices[0]?.text ?? '';
        check(refText.startsWith(text) && text.length > 0, `burst ${i}: streamed greedy is a prefix of sluice run`);
      })());
    } else if (kind === 2) {
      burst.push(client.chat.completions.create({ model: modelId, messages, max_tokens: 24, temperature: 0 })
        .then((r) => checkEqual(r.choices[0].message.content, chat.choices[0].message.content, `burst ${i}: chat`)));
    } else {
      burst.push(client.completions.create({ model: modelId, prompt: `Story ${i}:`, max_tokens: 16, temperature: 0.8, seed: i })
        .then((r) => check(r.choices[0].text.length > 0, `burst ${i}: sampled`)));
    }
  }
  const results = await Promise.allSettled(burst);
  const failed = results.filter((r) => r.status === 'rejected');
  check(failed.length === 0, `burst: ${failed.length} failed: ${failed.map((f) => f.reason).join('; ')}`);
  const afterBurst = await waitIdle(main);
  const okAfter = metric(afterBurst, served('completions', 'ok')) + metric(afterBurst, served('chat.completions', 'ok'));
  checkEqual(okAfter - okBefore, 64, 'all 64 burst requests counted ok');
  checkEqual(metric(afterBurst, 'sluice_kv_blocks_used'), kvBase, 'KV blocks back to baseline after the burst');
  check(metric(afterBurst, 'sluice_ttft_seconds_count') >= 64 && metric(afterBurst, 'sluice_e2e_seconds_count') >= 64,
    'latency histograms observed');

  // --- the README's curl examples, against this server
  const readme = spawn('bash', [README], {
    env: { ...process.env, SLUICE_URL: main.url, SLUICE_API_KEY: KEY, SLUICE_MODEL_ID: modelId },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let readmeOut = '';
  readme.stdout.on('data', (d) => { readmeOut += d; });
  readme.stderr.on('data', (d) => { readmeOut += d; });
  const readmeCode = await new Promise((resolve) => readme.on('exit', resolve));
  check(readmeCode === 0, `readme_examples.sh exited ${readmeCode}:\n${readmeOut}`);

  // --- SIGTERM drains: the open stream completes, new work gets 503, exit 0
  const drainStream = new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: modelId, prompt: PROMPT, max_tokens: 300, temperature: 0, ignore_eos: true, stream: true });
    const req = http.request({ host: '127.0.0.1', port: main.port, method: 'POST', path: '/v1/completions',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: `Bearer ${KEY}` } },
    (res) => {
      let text = '';
      let signalled = false;
      res.setEncoding('utf8');
      res.on('data', (c) => {
        text += c;
        if (!signalled) { signalled = true; main.proc.kill('SIGTERM'); }
      });
      res.on('end', () => resolve(text));
    });
    req.on('error', reject);
    req.end(body);
  });
  // Once SIGTERM is in, the server refuses new work with 503 while the stream drains.
  let saw503 = false;
  for (let i = 0; i < 200 && !saw503 && !main.exited; i++) {
    await sleep(10);
    const r = await post(main, '/v1/completions', greedy).catch(() => null);
    if (r && r.status === 503) { expectError(r, 503, 'service_unavailable', 'request while draining'); saw503 = true; }
  }
  check(saw503, 'a request during the drain got 503');
  const drained = await drainStream;
  check(drained.trimEnd().endsWith('data: [DONE]') && drained.includes('"finish_reason":"length"'),
    'the in-flight stream finished during the drain');
  const exit = await main.exitPromise;
  checkEqual(exit, { code: 0, signal: null }, 'SIGTERM: exit code 0');

  // --- too many queued requests: 429, and the server keeps serving
  const small = await startServer(['--max-seqs', '1', '--max-queued', '1']);
  const flood = [];
  for (let i = 0; i < 8; i++) {
    flood.push(post(small, '/v1/completions', { model: modelId, prompt: PROMPT, max_tokens: 200, temperature: 0, ignore_eos: true }, { auth: null }));
  }
  const floodResults = await Promise.all(flood);
  const n429 = floodResults.filter((r) => r.status === 429).length;
  const n200 = floodResults.filter((r) => r.status === 200).length;
  check(n429 >= 1 && n200 >= 1 && n429 + n200 === 8, `flood: ${n200} ok, ${n429} rate limited`);
  for (const r of floodResults.filter((x) => x.status === 429)) expectError(r, 429, 'rate_limit_exceeded', 'queue full');
  const afterFlood = await post(small, '/v1/completions', { ...greedy, return_token_ids: true }, { auth: null });
  check(afterFlood.status === 200, 'after the flood the server answers');
  checkEqual(afterFlood.json.choices[0].token_ids, refTokens, 'after the flood: still token-identical');
  const smallIdle = await waitIdle(small);
  checkEqual(metric(smallIdle, 'sluice_kv_blocks_used'), 0, 'flood left no KV blocks');
  checkEqual(await stopServer(small, 'SIGINT'), { code: 0, signal: null }, 'SIGINT: exit code 0');

  clearTimeout(overall);
  console.log(`E2E PASSED ${checks} checks`);
}

main().catch((e) => {
  console.error('FAIL:', e && e.stack ? e.stack : e);
  for (const s of servers) {
    console.error('--- server stderr ---\n' + s.stderr);
    if (!s.exited) s.proc.kill('SIGKILL');
  }
  process.exit(1);
});
