// Runs every SDK script against BASE_URL; exits non-zero when one fails.
import { spawnSync } from 'node:child_process';

let failed = 0;
for (const script of ['openai-responses.mjs', 'aisdk.mjs', 'anthropic.mjs']) {
  const r = spawnSync(process.execPath, [new URL(script, import.meta.url).pathname], { stdio: 'inherit', env: process.env });
  if (r.status !== 0) failed++;
}
process.exitCode = failed ? 1 : 0;
