// The REST API, authenticated by the session cookie. Changes carry the CSRF header the
// server demands of cookie-authenticated requests.

export const API = "api/v1";

export class ApiError extends Error {
  constructor(status, code, message, detail) {
    super(message);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

let onUnauthenticated = () => {};
export function whenUnauthenticated(handler) {
  onUnauthenticated = handler;
}

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-Tailrace-CSRF"] = "1";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`${API}${path}`, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data?.error ?? { code: `http_${response.status}`, message: text };
    if (response.status === 401 && !path.startsWith("/auth/session")) onUnauthenticated();
    throw new ApiError(response.status, error.code, error.message, error.detail);
  }
  return data;
}

// Path segments (run ids hold ":" and "+") are always encoded.
export function p(strings, ...values) {
  return strings.reduce((out, s, i) => out + s + (i < values.length ? encodeURIComponent(values[i]) : ""), "");
}

// A live view: the server sends the JSON of the matching GET now and on every change.
export function live(path, onSnapshot, onError = () => {}) {
  const source = new EventSource(`${API}${path}`);
  source.addEventListener("snapshot", (e) => onSnapshot(JSON.parse(e.data)));
  source.onerror = () => onError(source);
  return () => source.close();
}
