// Tool calls through the official OpenAI Node.js SDK, one model-output fixture
// per tool-call format, each behind the real chat template of a model family
// that writes it. The server is sluice_fixture_server: sluice's HTTP server and
// request path in front of a stand-in model whose output is the fixture text
// (tests/server_e2e/fixture_server.cpp). Run by tests/server_e2e_test.cpp,
// which passes, in the environment:
//   SLUICE_FIXTURE_SERVER  the fixture server executable
//   SLUICE_TOKENIZER       a GGUF whose tokenizer the server uses (stories260K)
//   SLUICE_TEMPLATES       ../shared/chat-templates
// Per format: plain and streamed completions (the SDK's own stream
// accumulator and the raw chunks) return the parsed tool_calls with
// finish_reason "tool_calls"; the assistant message and tool results go back
// through the template; tool_choice "none" returns the text as content; a
// malformed tool is a 400. Prints "TOOL CALLS E2E PASSED <n> checks".
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const SERVER = process.env.SLUICE_FIXTURE_SERVER;
const TOKENIZER = process.env.SLUICE_TOKENIZER;
const TEMPLATES = process.env.SLUICE_TEMPLATES;
const FIXTURES = new URL('./tool_call_fixtures/', import.meta.url).pathname;

let checks = 0;
function check(cond, what) {
  assert.ok(cond, what);
  checks++;
}
function checkEqual(actual, expected, what) {
  assert.deepStrictEqual(actual, expected, what);
  checks++;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const overall = setTimeout(() => {
  console.error('FAIL: tool-call e2e test exceeded 120 s');
  process.exit(1);
}, 120_000);

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the current weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'Get the local time in a time zone',
      parameters: { type: 'object', properties: { timezone: { type: 'string' } }, required: ['timezone'] },
    },
  },
];

const CASES = [
  {
    format: 'llama3',
    template: 'meta-llama-Llama-3.1-8B-Instruct.jinja',
    content: null,
    calls: [['get_weather', { city: 'Paris', unit: 'celsius' }]],
    id: /^call_[0-9a-f]{16}$/,
  },
  {
    format: 'hermes',
    template: 'Qwen-Qwen2.5-7B-Instruct.jinja',
    content: "I'll check both cities.",
    calls: [['get_weather', { city: 'Paris' }], ['get_weather', { city: 'London', unit: 'celsius' }]],
    id: /^call_[0-9a-f]{16}$/,
  },
  {
    format: 'mistral',
    template: 'mistralai-Mistral-Nemo-Instruct-2407.jinja',
    content: null,
    calls: [['get_weather', { city: 'Paris' }], ['get_time', { timezone: 'Europe/Paris' }]],
    id: /^(a1b2c3d4e|f5g6h7i8j)$/,
  },
  {
    format: 'deepseek',
    template: 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja',
    content: '<think>\nThe user asks for the weather in Paris.\n</think>',
    calls: [['get_weather', { city: 'Paris' }]],
    id: /^call_[0-9a-f]{16}$/,
  },
];

async function startServer(c) {
  const proc = spawn(SERVER, ['--tokenizer', TOKENIZER, '--chat-template', `${TEMPLATES}/${c.template}`,
                              '--output', `${FIXTURES}/${c.format}.txt`, '--port', '0'],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
  const s = { proc, stderr: '', exited: false };
  proc.stderr.on('data', (d) => { s.stderr += d.toString(); });
  proc.on('exit', () => { s.exited = true; });
  const t0 = Date.now();
  const re = /listening on http:\/\/127\.0\.0\.1:(\d+) \(tool calls: (\w+)\)/;
  while (!re.test(s.stderr)) {
    if (s.exited || Date.now() - t0 > 20_000) throw new Error(`fixture server did not start: ${s.stderr}`);
    await sleep(20);
  }
  const m = re.exec(s.stderr);
  s.url = `http://127.0.0.1:${m[1]}`;
  checkEqual(m[2], c.format, `${c.template}: the format detected from the template`);
  return s;
}

function checkCalls(c, message, finishReason, what) {
  checkEqual(finishReason, 'tool_calls', `${what}: finish_reason`);
  checkEqual(message.content ?? null, c.content, `${what}: content`);
  check(Array.isArray(message.tool_calls), `${what}: tool_calls present`);
  checkEqual(message.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments)]), c.calls,
             `${what}: calls and arguments`);
  for (const t of message.tool_calls) {
    checkEqual(t.type, 'function', `${what}: type`);
    check(c.id.test(t.id), `${what}: id ${t.id}`);
  }
  checkEqual(new Set(message.tool_calls.map((t) => t.id)).size, message.tool_calls.length, `${what}: distinct ids`);
}

async function runCase(c) {
  const s = await startServer(c);
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const messages = [{ role: 'user', content: "What's the weather in Paris?" }];
    const req = { model: 'fixture', messages, tools: TOOLS, tool_choice: 'auto', temperature: 0 };

    const plain = await client.chat.completions.create(req);
    checkCalls(c, plain.choices[0].message, plain.choices[0].finish_reason, `${c.format} plain`);

    // The SDK's stream helper assembles the deltas into a message.
    const stream = client.chat.completions.stream(req);
    const final = await stream.finalChatCompletion();
    checkCalls(c, final.choices[0].message, final.choices[0].finish_reason, `${c.format} streamed (SDK accumulator)`);

    // The raw chunks: each call's name (with id and type) before its arguments, finish_reason last.
    const chunks = [];
    for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) chunks.push(chunk);
    const deltas = chunks.flatMap((ch) => ch.choices.flatMap((x) => x.delta.tool_calls ?? []));
    checkEqual(deltas.length, 2 * c.calls.length, `${c.format} raw stream: two deltas per call`);
    for (let i = 0; i < c.calls.length; i++) {
      const [head, args] = [deltas[2 * i], deltas[2 * i + 1]];
      checkEqual([head.index, head.function.name, head.type, head.function.arguments], [i, c.calls[i][0], 'function', ''],
                 `${c.format} raw stream: call ${i} name first`);
      check(c.id.test(head.id), `${c.format} raw stream: call ${i} id`);
      checkEqual([args.index, JSON.parse(args.function.arguments)], [i, c.calls[i][1]],
                 `${c.format} raw stream: call ${i} arguments`);
    }
    const finishes = chunks.flatMap((ch) => ch.choices.map((x) => x.finish_reason)).filter((f) => f);
    checkEqual(finishes, ['tool_calls'], `${c.format} raw stream: one finish_reason`);
    checkEqual(chunks.at(-1).choices[0].finish_reason, 'tool_calls', `${c.format} raw stream: finish last`);

    // The calls and their results go back through the template.
    const back = [...messages, plain.choices[0].message,
                  ...plain.choices[0].message.tool_calls.map((t) => ({
                    role: 'tool', tool_call_id: t.id, name: t.function.name, content: '{"temperature": 18}' }))];
    const again = await client.chat.completions.create({ ...req, messages: back });
    checkEqual(again.choices[0].finish_reason, 'tool_calls', `${c.format} tool results accepted by the template`);

    // tool_choice "none": no parsing, the text is content.
    const none = await client.chat.completions.create({ ...req, tool_choice: 'none' });
    checkEqual(none.choices[0].finish_reason, 'stop', `${c.format} tool_choice none: finish_reason`);
    checkEqual(none.choices[0].message.content, readFileSync(`${FIXTURES}/${c.format}.txt`, 'utf8'),
               `${c.format} tool_choice none: content`);
    check(!none.choices[0].message.tool_calls, `${c.format} tool_choice none: no tool_calls`);

    // A malformed tool is refused naming the field.
    const bad = await client.chat.completions
      .create({ ...req, tools: [{ type: 'function', function: { name: 'no spaces allowed' } }] })
      .then(() => null, (e) => e);
    check(bad instanceof OpenAI.APIError && bad.status === 400, `${c.format} malformed tool: 400`);
    checkEqual(bad.param, 'tools[0].function.name', `${c.format} malformed tool: param`);
  } finally {
    s.proc.kill('SIGTERM');
  }
}

try {
  for (const c of CASES) await runCase(c);
  clearTimeout(overall);
  console.log(`TOOL CALLS E2E PASSED ${checks} checks`);
} catch (e) {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
}
