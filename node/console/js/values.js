// How a value is shown: JSON pretty-printed when it parses, text when it is UTF-8, hex otherwise.

import { asHex, asText } from "./bytes.js";
import { h } from "./dom.js";

/** The value as JSON, or undefined when it is not JSON. */
export function jsonOf(bytes) {
  const text = asText(bytes);
  if (text === null || text.trim() === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** What kind of value it is: "json", "text" or "binary". */
export function kindOf(bytes) {
  if (jsonOf(bytes) !== undefined) return "json";
  return asText(bytes) === null ? "binary" : "text";
}

/** The value for display, with its kind named. */
export function valueView(bytes, properties = {}) {
  const kind = kindOf(bytes);
  const shown = kind === "json" ? JSON.stringify(jsonOf(bytes), null, 2) : kind === "text" ? asText(bytes) : asHex(bytes);
  return h("div", {},
    h("span", { class: "muted" }, `${kind}, ${bytes.length} bytes`),
    h("pre", { ...properties, "data-kind": kind }, shown));
}

/** A short one-line preview of a value, for tables. */
export function preview(bytes, length = 80) {
  const text = asText(bytes);
  const shown = text === null ? asHex(bytes.slice(0, 32)) : text;
  return shown.length > length ? `${shown.slice(0, length)}…` : shown;
}
