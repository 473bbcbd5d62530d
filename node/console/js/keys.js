// The Keys page: browse the key space by prefix as a tree (folders at each "/"), read a key's
// value and metadata, and put or delete it. Every write carries the revision the user saw
// (If-Match) or If-None-Match for a new key, so the console never overwrites a change it has not
// shown; a 409 shows the user's version beside the current one.

import { ApiError, call, describe, get } from "./api.js";
import { asText, concat, fromBase64, fromText, keyLabel, prefixEnd, startsWith, toBase64 } from "./bytes.js";
import { diffView } from "./diff.js";
import { facts, h, link, notice, page, replace } from "./dom.js";
import { valueView } from "./values.js";

// Entries (folders and keys) per page of the tree, and requests per page at most: a prefix with
// many folders costs one request per folder, bounded here. A request asks for many keys, or for
// few right after one whose keys all fell in one folder (the next is likely to as well, and only
// its first key is needed to name the folder).
const ENTRIES_PER_PAGE = 100;
const KEYS_PER_REQUEST = 200;
const KEYS_PER_REQUEST_IN_FOLDERS = 10;
const REQUESTS_PER_PAGE = 50;
const SLASH = 0x2f;

/** The bytes a URL parameter names: `name` as text or `name64` as base64. */
export function bytesParameter(parameters, name) {
  if (parameters.has(`${name}64`)) return fromBase64(parameters.get(`${name}64`));
  return fromText(parameters.get(name) || "");
}

/** URL parameters naming `bytes`: as text when it is plain UTF-8, else as base64. */
export function bytesParameters(name, bytes) {
  const text = asText(bytes);
  return text !== null ? { [name]: text } : { [`${name}64`]: toBase64(bytes) };
}

// With encoding=base64 the key in the path is base64 too, percent-encoded ("/" and "+" in it).
export const keyPath = (key) => `/v1/kv/${encodeURIComponent(toBase64(key))}?encoding=base64`;

/** The folders and keys of one answer's keys under `prefix`, skipping keys of the folder that was
 *  open at the end of the previous answer: {entries, openFolder}. */
function entriesOf(kvs, prefix, openFolder) {
  const entries = [];
  for (const kv of kvs) {
    const key = fromBase64(kv.key);
    if (openFolder && startsWith(key, openFolder)) continue;
    const slash = key.subarray(prefix.length).indexOf(SLASH);
    if (slash < 0) {
      openFolder = null;
      entries.push({ kind: "key", bytes: key });
    } else {
      openFolder = key.slice(0, prefix.length + slash + 1);
      entries.push({ kind: "folder", bytes: openFolder });
    }
  }
  return { entries, openFolder };
}

/** One page of the tree under `prefix`, from `start`, handing each answer's entries to `show` as
 *  they arrive: {next, revision}, `next` null at the end of the prefix. */
async function treePage(prefix, start, revision, show) {
  const end = prefixEnd(prefix);
  let shown = 0;
  let from = start;
  let limit = KEYS_PER_REQUEST;
  for (let requests = 0; requests < REQUESTS_PER_PAGE && shown < ENTRIES_PER_PAGE; requests += 1) {
    const query = new URLSearchParams({ key: toBase64(from), range_end: toBase64(end), keys_only: "true", limit: String(limit), encoding: "base64" });
    if (revision) query.set("revision", revision);
    const answer = await get(`/v1/kv?${query}`);
    revision = revision || answer.header.revision;
    const { entries, openFolder } = entriesOf(answer.kvs, prefix, null);
    show(entries);
    shown += entries.length;
    if (!answer.more) return { next: null, revision };
    const last = fromBase64(answer.kvs[answer.kvs.length - 1].key);
    const endedInFolder = openFolder && startsWith(last, openFolder);
    from = endedInFolder ? prefixEnd(openFolder) : concat(last, new Uint8Array([0]));
    limit = endedInFolder && entries.length === 1 ? KEYS_PER_REQUEST_IN_FOLDERS : KEYS_PER_REQUEST;
  }
  return { next: from, revision };
}

export function renderKeys(main, parameters, navigate) {
  const prefix = bytesParameter(parameters, "prefix");
  const selected = parameters.has("key") || parameters.has("key64") ? bytesParameter(parameters, "key") : null;
  const list = h("ul", { class: "tree", "data-testid": "key-list" });
  const more = h("div", { class: "toolbar" });
  const detail = h("section", { "aria-label": "Key" });
  const prefixInput = h("input", { id: "prefix", value: asText(prefix) ?? "", size: 40, placeholder: "a/b/" });
  const jump = h("form", { class: "toolbar" },
    h("label", { for: "prefix" }, "Prefix"), prefixInput, h("button", { type: "submit" }, "Browse"),
    h("button", { type: "button", "data-testid": "new-key", onclick: () => showNewKey(detail, prefix, navigate) }, "New key"));
  jump.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate(page("keys", bytesParameters("prefix", fromText(prefixInput.value))));
  });
  replace(main, h("h1", {}, "Keys"), jump, breadcrumbs(prefix),
    h("div", { class: "split" }, h("section", { "aria-label": "Tree" }, list, more), detail));
  loadTree(prefix, prefix, null, list, more, selected);
  if (selected) showKey(detail, selected, prefix, navigate);
  else replace(detail, h("p", { class: "muted" }, "Choose a key, or make a new one."));
}

function breadcrumbs(prefix) {
  const parts = [link(page("keys"), "(all keys)")];
  let start = 0;
  for (let index = 0; index < prefix.length; index += 1) {
    if (prefix[index] === SLASH) {
      const folder = prefix.slice(0, index + 1);
      parts.push(" / ", link(page("keys", bytesParameters("prefix", folder)), keyLabel(prefix.slice(start, index))));
      start = index + 1;
    }
  }
  return h("p", { class: "muted", "data-testid": "breadcrumbs" }, parts);
}

async function loadTree(prefix, start, revision, list, more, selected) {
  replace(more, h("span", { class: "muted" }, "Loading…"));
  try {
    const result = await treePage(prefix, start, revision, (entries) => {
      for (const entry of entries) list.append(treeItem(prefix, entry, selected));
    });
    if (list.children.length === 0) list.append(h("li", { class: "muted" }, "No keys under this prefix."));
    replace(more, result.next
      ? h("button", { type: "button", "data-testid": "more-keys", onclick: () => loadTree(prefix, result.next, result.revision, list, more, selected) }, "More")
      : h("span", { class: "muted" }, `At revision ${result.revision}.`));
  } catch (error) {
    replace(more, notice("error", describe(error)));
  }
}

function treeItem(prefix, entry, selected) {
  const label = keyLabel(entry.bytes.subarray(prefix.length)) || "(the prefix itself)";
  if (entry.kind === "folder") {
    return h("li", { class: "folder" }, link(page("keys", bytesParameters("prefix", entry.bytes)), label));
  }
  const current = selected && selected.length === entry.bytes.length && selected.every((byte, index) => byte === entry.bytes[index]);
  return h("li", { "data-key": keyLabel(entry.bytes), class: current ? "selected" : null },
    link(page("keys", { ...bytesParameters("prefix", prefix), ...bytesParameters("key", entry.bytes) }), label));
}

async function showKey(detail, key, prefix, navigate) {
  replace(detail, h("p", { class: "muted" }, "Loading…"));
  let answer;
  try {
    answer = await get(keyPath(key));
  } catch (error) {
    const text = error instanceof ApiError && error.code === "not_found" ? `${keyLabel(key)} does not exist (any more).` : describe(error);
    replace(detail, notice(error.code === "not_found" ? "warning" : "error", text));
    return;
  }
  replace(detail, ...keyView(answer.kv, prefix, navigate, detail));
}

function keyView(kv, prefix, navigate, detail) {
  const key = fromBase64(kv.key);
  const value = fromBase64(kv.value);
  const message = h("div", { "aria-live": "polite" });
  const parts = [
    h("h2", { "data-testid": "key-name" }, keyLabel(key)),
    facts([
      ["Revision", h("span", { "data-testid": "key-mod-revision" }, String(kv.mod_revision))],
      ["Created at", String(kv.create_revision)],
      ["Version", String(kv.version)],
      ["Lease", kv.lease && kv.lease !== "0" && kv.lease !== 0 ? link(page("leases", { id: kv.lease }), String(kv.lease)) : "none"],
    ]),
    h("p", {}, link(page("history", bytesParameters("key", key)), "History of this key")),
    valueView(value, { "data-testid": "key-value" }),
  ];
  const text = asText(value);
  if (text === null) {
    parts.push(h("p", { class: "muted" }, "A binary value cannot be edited here."));
  } else {
    const editor = h("textarea", { id: "value-editor", "data-testid": "value-editor", "aria-label": "New value" });
    editor.value = text;
    const save = async () => {
      const written = await writeKey(key, fromText(editor.value), kv, message);
      if (written) navigate(page("keys", { ...bytesParameters("prefix", prefix), ...bytesParameters("key", key) }), { replaceEntry: true });
    };
    parts.push(h("label", { for: "value-editor" }, "Edit the value"), editor,
      h("div", { class: "toolbar" },
        h("button", { type: "button", class: "primary", "data-testid": "save-key", onclick: save }, `Save (if still at revision ${kv.mod_revision})`),
        h("button", { type: "button", class: "danger", "data-testid": "delete-key", onclick: () => deleteKey(key, kv, message, prefix, navigate, detail) }, "Delete")));
  }
  parts.push(message);
  return parts;
}

/** A body whose lease id is written as digits: lease ids may pass 2^53. */
function putBody(value, lease) {
  const body = `{"value":${JSON.stringify(toBase64(value))}`;
  return lease && lease !== "0" && lease !== 0 ? `${body},"lease":${String(lease)}}` : `${body}}`;
}

async function writeKey(key, value, seen, message) {
  try {
    await call("PUT", keyPath(key), { body: putBody(value, seen.lease), headers: { "If-Match": `"${seen.mod_revision}"` } });
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.code === "conflict") {
      replace(message, conflictView(value, error.body.current, seen));
      message.scrollIntoView({ block: "start" });
    } else {
      replace(message, notice("error", describe(error)));
    }
    return false;
  }
}

function conflictView(mine, current, seen) {
  if (!current) {
    return h("div", { "data-testid": "conflict" }, notice("error", `Not saved: the key was deleted after revision ${seen.mod_revision}.`));
  }
  const currentValue = fromBase64(current.value);
  return h("div", { "data-testid": "conflict" },
    notice("error", `Not saved: someone changed the key after revision ${seen.mod_revision}; it is now at revision ${current.mod_revision}. Nothing was overwritten.`),
    h("div", { class: "split" },
      h("div", {}, h("h2", {}, "Your version (not saved)"), valueView(mine, { "data-testid": "conflict-mine" })),
      h("div", {}, h("h2", {}, `Current version (revision ${current.mod_revision})`), valueView(currentValue, { "data-testid": "conflict-current" }))),
    h("h2", {}, "From the current version to yours"),
    diffView(currentValue, mine));
}

async function deleteKey(key, kv, message, prefix, navigate) {
  if (!window.confirm(`Delete ${keyLabel(key)} (if still at revision ${kv.mod_revision})?`)) return;
  try {
    await call("DELETE", keyPath(key), { headers: { "If-Match": `"${kv.mod_revision}"` } });
    navigate(page("keys", bytesParameters("prefix", prefix)), { replaceEntry: true });
  } catch (error) {
    if (error instanceof ApiError && error.code === "conflict") replace(message, conflictView(new Uint8Array(0), error.body.current, kv));
    else replace(message, notice("error", describe(error)));
  }
}

function showNewKey(detail, prefix, navigate) {
  const name = h("input", { id: "new-key-name", "data-testid": "new-key-name", value: asText(prefix) ?? "", size: 40 });
  const value = h("textarea", { id: "new-key-value", "data-testid": "new-key-value" });
  const message = h("div", { "aria-live": "polite" });
  const form = h("form", {},
    h("h2", {}, "New key"),
    h("label", { for: "new-key-name" }, "Key"), name,
    h("label", { for: "new-key-value" }, "Value"), value,
    h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary", "data-testid": "create-key" }, "Create (only if absent)")),
    message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = fromText(name.value);
    try {
      await call("PUT", keyPath(key), { body: putBody(fromText(value.value), 0), headers: { "If-None-Match": "*" } });
      navigate(page("keys", { ...bytesParameters("prefix", prefix), ...bytesParameters("key", key) }));
    } catch (error) {
      const text = error instanceof ApiError && error.code === "conflict" ? `${name.value} exists already; nothing was overwritten.` : describe(error);
      replace(message, notice("error", text));
    }
  });
  replace(detail, form);
  name.focus();
}
