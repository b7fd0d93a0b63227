// sandbox-agent's own ACP-over-HTTP client (npm acp-http-client, written by others)
// against a running `tether serve`: run by tests/integration/test_serve_acp_http_client.py.
//
// argv[2]: JSON {module, baseUrl, token, path, cwd}, `module` the installed
// acp-http-client's dist/index.js. Prints one JSON object: what the client got, and
// every envelope both ways (for the test's schema checks). Uses the package's public
// API only: AcpHttpClient with `token` (the bearer), `fetch` (recording each exchange), `transport.path` and
// `transport.bootstrapQuery` (the agent), `client` handlers and `onEnvelope`.
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(process.argv[2]);
const { AcpHttpClient, PROTOCOL_VERSION } = await import(pathToFileURL(cfg.module).href);

const envelopes = [];
const texts = [];
const asked = [];
const waiters = [];

function onText(text) {
  texts.push(text);
  for (const w of [...waiters]) {
    if (w.pred()) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve();
    }
  }
}

// Resolves when pred() holds (checked on each update); rejects after ms.
function until(pred, ms, what) {
  if (pred()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const w = { pred, resolve };
    waiters.push(w);
    setTimeout(() => {
      const i = waiters.indexOf(w);
      if (i >= 0) {
        waiters.splice(i, 1);
        reject(new Error(`timed out waiting for ${what}; texts so far: ${JSON.stringify(texts)}`));
      }
    }, ms);
  });
}

// What went over HTTP: method, status, content type, the headers the client sent.
const http = [];
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  const sent = Object.fromEntries(new Headers(init.headers).entries());
  delete sent.authorization;
  http.push({
    method: init.method,
    status: response.status,
    type: response.headers.get("content-type"),
    sent,
  });
  return response;
}

const client = new AcpHttpClient({
  baseUrl: cfg.baseUrl,
  fetch: recordingFetch,
  token: cfg.token,
  transport: { path: cfg.path, bootstrapQuery: { agent: "mock" } },
  onEnvelope: (envelope, direction) => envelopes.push({ direction, envelope }),
  client: {
    sessionUpdate: async (note) => {
      const u = note.update;
      if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
        onText(u.content.text);
      }
    },
    requestPermission: async (req) => {
      asked.push(req);
      const allow = req.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    },
  },
});

const out = { stops: {}, texts, asked, envelopes, http };
try {
  out.initialize = await client.initialize({
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "acp-http-client-test", version: "1" },
  });
  const session = await client.newSession({ cwd: cfg.cwd, mcpServers: [] });
  const sessionId = session.sessionId;
  out.sessionId = sessionId;
  const prompt = (text) => client.prompt({ sessionId, prompt: [{ type: "text", text }] });

  out.stops.echo = (await prompt("echo hi")).stopReason;
  // The answer comes in the POST, the updates on the stream: either may be first.
  await until(() => texts.includes("hi"), 20000, "hi");

  out.stops.stream = (await prompt("stream 5 part")).stopReason;
  await until(() => texts.includes("part 4\n"), 20000, "5 streamed chunks");

  out.stops.permission = (await prompt("tool edit mock edit")).stopReason;
  await until(() => texts.includes("permission: allowed"), 20000, "the permission answer");

  const long = prompt("echo go ; sleep 60000");
  await until(() => texts.includes("go"), 20000, "go");
  await client.cancel({ sessionId });
  out.stops.cancelled = (await long).stopReason;

  out.list = await client.listSessions({ cwd: cfg.cwd });
} catch (error) {
  out.error = String(error && error.stack ? error.stack : error);
} finally {
  await client.disconnect(); // DELETE
  out.disconnected = true;
}
process.stdout.write(JSON.stringify(out) + "\n");
