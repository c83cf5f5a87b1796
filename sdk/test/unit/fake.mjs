// A scripted fetch: each call takes the next answer from a list (or a
// function of the request) and records what was sent.

export function fakeFetch(answers) {
  const calls = [];
  const f = async (url, init = {}) => {
    const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
    let body = init.body;
    if (body instanceof Uint8Array) body = new TextDecoder().decode(body);
    const call = { url: String(url), method: init.method ?? "GET", headers, body };
    calls.push(call);
    const next = typeof answers === "function" ? answers(call, calls.length - 1) : answers.shift();
    if (next === undefined) throw new Error(`unexpected request ${call.method} ${call.url}`);
    if (next instanceof Error) throw next;
    // Like fetch, a pending answer ends when the request's signal aborts.
    const signal = init.signal;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
      Promise.resolve(next).then(resolve, reject);
    });
  };
  f.calls = calls;
  return f;
}

export function json(status, value, headers = {}) {
  return new Response(JSON.stringify(value), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

export function error(status, code, extra = {}, headers = {}) {
  const retryable = status === 429 || status === 503;
  return json(status, { error: { code, message: code, retryable, ...extra } }, headers);
}

export function page(records, cursor, { upToDate = false, sealed = false, status = 200 } = {}) {
  const headers = { "prisma-next-cursor": cursor, "content-type": "application/json" };
  if (upToDate) headers["prisma-up-to-date"] = "true";
  if (sealed) headers["prisma-sealed"] = "true";
  return new Response(status === 204 ? null : JSON.stringify(records), { status, headers });
}

export const KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
