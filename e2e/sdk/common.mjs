// Shared helpers for the SDK scripts: where to connect, a fetch that records
// the x-ctxproxy-* response headers, and the JSON summary each script prints.
export const BASE_URL = (process.env.BASE_URL || 'http://127.0.0.1:11435').replace(/\/+$/, '');
export const MODEL = process.env.MODEL || 'tiny-tools';
export const SESSION = process.env.SESSION_ID || `sdk-e2e-${process.pid}`;

// headersSeen collects, per request, the x-ctxproxy-* headers of the answer.
export const headersSeen = [];

export async function recordingFetch(input, init) {
  const res = await fetch(input, init);
  const seen = {};
  for (const [k, v] of res.headers) {
    if (k.startsWith('x-ctxproxy')) seen[k] = v;
  }
  headersSeen.push({ url: String(input instanceof Request ? input.url : input), status: res.status, headers: seen });
  return res;
}

// The same fixed tool for every SDK, and a call to it that the history of
// the tool tests replays (the test models answer with random text and never
// call a tool themselves).
export const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', description: 'City name' } },
  required: ['city'],
};
export const weatherCall = { id: 'call_weather_1', name: 'get_weather', args: { city: 'Paris' } };
export const weatherResult = '{"city":"Paris","temp_c":21}';

// run executes the named checks and prints one JSON summary line per check.
// A check returns {usage, ...details}; a thrown error makes it fail.
export async function run(checks) {
  let failed = 0;
  for (const [name, fn] of Object.entries(checks)) {
    const from = headersSeen.length;
    let summary;
    try {
      const out = await fn();
      summary = { check: name, ok: true, ...out };
    } catch (err) {
      failed++;
      summary = { check: name, ok: false, error: String(err?.message || err), status: err?.status };
    }
    summary.headers = headersSeen.slice(from).map((h) => h.headers);
    console.log(JSON.stringify(summary));
  }
  if (failed) process.exitCode = 1;
}

// must throws unless cond holds.
export function must(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}
