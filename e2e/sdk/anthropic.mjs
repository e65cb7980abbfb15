// @anthropic-ai/sdk: messages.create and messages.stream, plain and with a
// tool_use / tool_result pair in the history.
import Anthropic from '@anthropic-ai/sdk';
import { BASE_URL, MODEL, SESSION, recordingFetch, run, must, weatherSchema, weatherCall, weatherResult } from './common.mjs';

const client = new Anthropic({ baseURL: BASE_URL, apiKey: process.env.ANTHROPIC_API_KEY || 'ollama', fetch: recordingFetch, defaultHeaders: { 'X-Session-ID': SESSION }, maxRetries: 0 });
const tools = [{ name: weatherCall.name, description: 'Current weather in a city', input_schema: weatherSchema }];
const toolHistory = [
  { role: 'user', content: 'What is the weather in Paris?' },
  { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' }, { type: 'tool_use', id: 'toolu_weather_1', name: weatherCall.name, input: weatherCall.args }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_weather_1', content: weatherResult }] },
];

await run({
  async messages_create() {
    const m = await client.messages.create({ model: MODEL, max_tokens: 8, system: 'Answer briefly.', messages: [{ role: 'user', content: 'Say hello.' }] });
    must(m.type === 'message' && m.role === 'assistant', 'a message');
    must(m.content.some((b) => b.type === 'text'), 'a text block');
    return { id: m.id, stop_reason: m.stop_reason, usage: m.usage };
  },
  async messages_create_tool() {
    const m = await client.messages.create({ model: MODEL, max_tokens: 8, system: [{ type: 'text', text: 'Use the tools.' }], tools, messages: toolHistory });
    must(m.stop_reason, 'a stop reason');
    return { stop_reason: m.stop_reason, blocks: m.content.map((b) => b.type), usage: m.usage };
  },
  async messages_stream_tool() {
    const events = [];
    const stream = client.messages.stream({ model: MODEL, max_tokens: 8, tools, messages: toolHistory });
    stream.on('streamEvent', (e) => events.push(e.type));
    const final = await stream.finalMessage();
    must(events[0] === 'message_start' && events.at(-1) === 'message_stop', 'message_start … message_stop');
    return { events: [...new Set(events)], stop_reason: final.stop_reason, text: final.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), usage: final.usage };
  },
});
