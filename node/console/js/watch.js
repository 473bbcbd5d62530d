// The Watch page: a live tail of the events under a prefix (GET /v1/watch as a stream), with the
// member's progress bookmarks shown. Pausing ends the stream and remembers the last revision seen;
// resuming opens a new one from the revision after it, so no event is lost in between (unless
// compaction removed it, which the member answers with 410 and the page says).

import { ApiError, describe, stream } from "./api.js";
import { asText, fromBase64, fromText, keyLabel, toBase64 } from "./bytes.js";
import { h, link, notice, page, replace } from "./dom.js";
import { bytesParameter, bytesParameters } from "./keys.js";
import { preview } from "./values.js";

// Rows kept on screen; older ones leave the view (they were shown, and the history page has them).
const MOST_ROWS = 500;
const BOOKMARK_MILLISECONDS = 2000;

export function renderWatch(main, parameters, navigate) {
  const prefix = bytesParameter(parameters, "prefix");
  const watching = parameters.has("prefix") || parameters.has("prefix64");
  const input = h("input", { id: "watch-prefix", value: asText(prefix) ?? "", size: 40, placeholder: "every key" });
  const form = h("form", { class: "toolbar" },
    h("label", { for: "watch-prefix" }, "Prefix"), input, h("button", { type: "submit" }, "Watch"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate(page("watch", bytesParameters("prefix", fromText(input.value))));
  });
  const state = h("p", { "data-testid": "watch-state", "aria-live": "polite" });
  const bookmark = h("p", { class: "muted", "data-testid": "watch-bookmark" });
  const rows = h("tbody", {});
  const pause = h("button", { type: "button", "data-testid": "watch-pause" }, "Pause");
  const events = h("div", { class: "events" }, h("table", { "data-testid": "watch-events" },
    h("thead", {}, h("tr", {}, ["Revision", "Event", "Key", "Value"].map((name) => h("th", { scope: "col" }, name)))), rows));
  replace(main, h("h1", {}, "Watch"), form);
  if (!watching) {
    main.append(h("p", { class: "muted" }, "Name a prefix (empty for every key) and watch its changes as they happen."));
    return null;
  }
  main.append(h("div", { class: "toolbar" }, pause, state), bookmark, events);
  const tail = { prefix, lastRevision: null, controller: null, stopped: false };
  pause.addEventListener("click", () => {
    if (tail.controller) {
      tail.controller.abort();
      tail.controller = null;
      pause.textContent = "Resume";
      replace(state, `Paused after revision ${tail.lastRevision ?? "–"}; resuming starts from the next one.`);
    } else {
      pause.textContent = "Pause";
      open(tail, rows, state, bookmark);
    }
  });
  open(tail, rows, state, bookmark);
  return () => {
    tail.stopped = true;
    if (tail.controller) tail.controller.abort();
  };
}

async function open(tail, rows, state, bookmark) {
  const controller = new AbortController();
  tail.controller = controller;
  const query = new URLSearchParams({ key: toBase64(tail.prefix), prefix: "true", encoding: "base64", progress_notify_ms: String(BOOKMARK_MILLISECONDS) });
  if (tail.lastRevision !== null) query.set("start_revision", String(tail.lastRevision + 1));
  replace(state, `Watching ${keyLabel(tail.prefix) || "every key"}…`);
  try {
    await stream(`/v1/watch?${query}`, { signal: controller.signal, onLine: (message) => receive(message, tail, rows, state, bookmark) });
    if (tail.controller === controller) replace(state, notice("warning", "The member ended the watch."));
  } catch (error) {
    if (controller.signal.aborted) return;
    const text = error instanceof ApiError && error.code === "compacted"
      ? `Events after revision ${tail.lastRevision} were compacted away (compact revision ${error.body.compact_revision}); watch again from now.`
      : describe(error);
    replace(state, notice("error", text));
  }
}

function receive(message, tail, rows, state, bookmark) {
  if (message.type === "CREATED") {
    replace(state, h("span", { "data-testid": "watch-live" }, `Live: watching ${keyLabel(tail.prefix) || "every key"} from revision ${tail.lastRevision === null ? message.revision + 1 : tail.lastRevision + 1}.`));
    if (tail.lastRevision === null) tail.lastRevision = message.revision;
  } else if (message.type === "EVENTS") {
    for (const event of message.events) rows.prepend(eventRow(event));
    while (rows.children.length > MOST_ROWS) rows.lastElementChild.remove();
    tail.lastRevision = message.revision;
  } else if (message.type === "BOOKMARK") {
    tail.lastRevision = Math.max(tail.lastRevision ?? 0, message.revision);
    replace(bookmark, `Bookmark: every event through revision ${message.revision} has arrived (${new Date().toLocaleTimeString()}).`);
    bookmark.dataset.revision = String(message.revision);
  } else if (message.type === "CANCELED") {
    replace(state, notice("warning", `The member canceled the watch: ${message.reason}.`));
  }
}

function eventRow(event) {
  const key = fromBase64(event.kv.key);
  const value = event.type === "PUT" ? preview(fromBase64(event.kv.value)) : "";
  return h("tr", { "data-key": keyLabel(key), "data-type": event.type, "data-revision": event.kv.mod_revision },
    h("td", {}, String(event.kv.mod_revision)), h("td", {}, event.type),
    h("td", {}, link(page("history", bytesParameters("key", key)), keyLabel(key))), h("td", { class: "mono" }, value));
}
