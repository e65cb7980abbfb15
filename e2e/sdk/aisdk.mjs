// The AI SDK's default OpenAI provider (openai(model): the Responses API):
// generateText with a tool, and with a tool call and result in the history.
import { generateText, tool, jsonSchema } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { BASE_URL, MODEL, SESSION, recordingFetch, run, must, weatherSchema, weatherCall, weatherResult } from './common.mjs';

const openai = createOpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: process.env.OPENAI_API_KEY || 'ollama', fetch: recordingFetch, headers: { 'X-Session-ID': SESSION } });
const tools = {
  [weatherCall.name]: tool({
    description: 'Current weather in a city',
    inputSchema: jsonSchema(weatherSchema),
    execute: async () => JSON.parse(weatherResult),
  }),
};

await run({
  async aisdk_generate_text_tool() {
    const r = await generateText({ model: openai(MODEL), system: 'Answer briefly.', prompt: 'What is the weather in Paris?', tools, maxOutputTokens: 8, maxRetries: 0 });
    must(typeof r.text === 'string', 'text');
    return { finish: r.finishReason, text: r.text, steps: r.steps.length, usage: r.usage };
  },
  async aisdk_tool_history() {
    const r = await generateText({
      model: openai(MODEL),
      tools,
      maxOutputTokens: 8,
      maxRetries: 0,
      messages: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool-call', toolCallId: weatherCall.id, toolName: weatherCall.name, input: weatherCall.args }] },
        { role: 'tool', content: [{ type: 'tool-result', toolCallId: weatherCall.id, toolName: weatherCall.name, output: { type: 'json', value: JSON.parse(weatherResult) } }] },
      ],
    });
    must(r.response?.id, 'a response id');
    return { finish: r.finishReason, text: r.text, usage: r.usage };
  },
});
