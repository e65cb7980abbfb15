// npm openai: responses.create plain, streamed, and with a function tool
// (a tool definition plus a replayed function_call / function_call_output).
import OpenAI from 'openai';
import { BASE_URL, MODEL, SESSION, recordingFetch, run, must, weatherSchema, weatherCall, weatherResult } from './common.mjs';

const client = new OpenAI({
  baseURL: `${BASE_URL}/v1`,
  apiKey: process.env.OPENAI_API_KEY || 'ollama',
  fetch: recordingFetch,
  defaultHeaders: { 'X-Session-ID': SESSION },
  maxRetries: 0,
});

const tools = [{ type: 'function', name: weatherCall.name, description: 'Current weather in a city', parameters: weatherSchema, strict: false }];

await run({
  async responses_plain() {
    const r = await client.responses.create({ model: MODEL, instructions: 'Answer briefly.', input: 'Say hello.', max_output_tokens: 8 });
    must(r.object === 'response', 'object is response');
    must(typeof r.output_text === 'string' && r.output_text.length > 0, 'output_text');
    return { id: r.id, status: r.status, text: r.output_text, usage: r.usage };
  },
  async responses_stream() {
    const types = [];
    let text = '';
    let final;
    const stream = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Count to three.' }] }], max_output_tokens: 8, stream: true });
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
    }
    must(final, 'a final response event');
    must(final.output.some((o) => o.type === 'message'), 'a message item');
    must(text.length > 0, 'text deltas');
    // The SDK's own accumulator, which checks item ids and indexes.
    const helper = client.responses.stream({ model: MODEL, input: 'Again.', max_output_tokens: 4 });
    const done = await helper.finalResponse();
    return { events: [...new Set(types)], text, usage: final.usage, helper_text: done.output_text };
  },
  async responses_tool() {
    const first = await client.responses.create({ model: MODEL, input: 'What is the weather in Paris?', tools, tool_choice: 'auto', max_output_tokens: 8 });
    const calls = first.output.filter((o) => o.type === 'function_call');
    const second = await client.responses.create({
      model: MODEL,
      instructions: 'Use the tool results.',
      tools,
      max_output_tokens: 8,
      input: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { type: 'function_call', call_id: weatherCall.id, name: weatherCall.name, arguments: JSON.stringify(weatherCall.args) },
        { type: 'function_call_output', call_id: weatherCall.id, output: weatherResult },
      ],
    });
    must(second.output.length > 0, 'output after the tool result');
    return { first_calls: calls.length, text: second.output_text, usage: second.usage };
  },
});
