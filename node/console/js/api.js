// The console's one way to talk to its member: the client API on the same origin, with the
// bearer token (kept in this page's memory only, never in storage) when signed in. Every failure
// becomes an ApiError carrying the contract's error code, so pages can show a 403 or a 409 for
// what it is.

let token = null;
let userName = null;

export function signIn(name, newToken) {
  userName = name;
  token = newToken;
}

export function signOut() {
  userName = null;
  token = null;
}

export function currentUser() {
  return userName;
}

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || `http_${status}`;
    this.body = body || {};
  }
}

// Lease ids are 64-bit and JSON numbers past 2^53 lose digits in JavaScript, so lease ids are
// turned into strings before parsing. Keys and values come base64-encoded, so no user data can
// look like one of these fields.
const LARGE_IDS = /("(?:id|lease|ID)"\s*:\s*)(-?\d{16,})/g;

export function parseJson(text) {
  return JSON.parse(text.replace(LARGE_IDS, '$1"$2"'));
}

function headersOf(extra) {
  const headers = new Headers(extra || {});
  if (token) headers.set("Authorization", `Bearer ${token}`);
  return headers;
}

/** Calls the member: answers the parsed JSON body, or throws an ApiError. */
export async function call(method, path, { body, headers, signal } = {}) {
  const request = { method, headers: headersOf(headers), signal };
  if (body !== undefined) {
    request.body = typeof body === "string" ? body : JSON.stringify(body);
    if (!request.headers.has("Content-Type")) request.headers.set("Content-Type", "application/json");
  }
  const response = await fetch(path, request);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? parseJson(text) : null;
  } catch {
    parsed = { error: { code: "invalid_answer", message: text.slice(0, 200) } };
  }
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("revkv-unauthenticated"));
    throw error;
  }
  return parsed;
}

export const get = (path, options) => call("GET", path, options);

/** Opens a streaming GET (a watch) and calls `onLine` with each parsed line until it ends or
 *  `signal` aborts it. */
export async function stream(path, { signal, onLine }) {
  const response = await fetch(path, { headers: headersOf(), signal });
  if (!response.ok) {
    const text = await response.text();
    let parsed = null;
    try {
      parsed = parseJson(text);
    } catch {
      parsed = null;
    }
    throw new ApiError(response.status, parsed);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let newline = pending.indexOf("\n");
    while (newline >= 0) {
      const line = pending.slice(0, newline).trim();
      pending = pending.slice(newline + 1);
      if (line) onLine(parseJson(line));
      newline = pending.indexOf("\n");
    }
  }
}

/** What an ApiError means to a person, with the contract's code. */
export function describe(error) {
  if (!(error instanceof ApiError)) return String(error && error.message ? error.message : error);
  if (error.code === "forbidden") return "Your roles do not allow this (403 forbidden).";
  if (error.code === "unauthenticated") return "Sign in first (401 unauthenticated).";
  return `${error.message} (${error.status} ${error.code})`;
}
