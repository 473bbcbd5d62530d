// The difference between two versions of a value. JSON values are compared field by field (the
// paths that were added, removed or changed), not line by line, because a reformatted object with
// one changed field should show one change. Other text is compared by lines.

import { asText } from "./bytes.js";
import { h, table } from "./dom.js";
import { jsonOf } from "./values.js";

// Beyond this many lines a line diff (quadratic) is not attempted.
const MOST_LINES = 2000;

function isObject(value) {
  return value !== null && typeof value === "object";
}

function pathOf(parent, key, inArray) {
  if (inArray) return `${parent}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`;
}

/** Every change from `before` to `after`: [{path, kind: "added"|"removed"|"changed", before, after}]. */
export function jsonChanges(before, after, path = "$") {
  if (!isObject(before) || !isObject(after) || Array.isArray(before) !== Array.isArray(after)) {
    return JSON.stringify(before) === JSON.stringify(after) ? [] : [{ path, kind: "changed", before, after }];
  }
  const inArray = Array.isArray(before);
  const keys = inArray
    ? [...Array(Math.max(before.length, after.length)).keys()].map(String)
    : [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  const changes = [];
  for (const key of keys) {
    const had = Object.prototype.hasOwnProperty.call(before, key);
    const has = Object.prototype.hasOwnProperty.call(after, key);
    const childPath = pathOf(path, key, inArray);
    if (had && !has) changes.push({ path: childPath, kind: "removed", before: before[key] });
    else if (!had && has) changes.push({ path: childPath, kind: "added", after: after[key] });
    else changes.push(...jsonChanges(before[key], after[key], childPath));
  }
  return changes;
}

/** Line changes by longest common subsequence: [{kind: "same"|"added"|"removed", line}]. */
export function lineChanges(beforeText, afterText) {
  // An empty value (or a deleted key's) has no lines, rather than one empty line.
  const linesOf = (text) => (text === "" ? [] : text.split("\n"));
  const before = linesOf(beforeText);
  const after = linesOf(afterText);
  if (before.length > MOST_LINES || after.length > MOST_LINES) return null;
  const common = Array.from({ length: before.length + 1 }, () => new Uint32Array(after.length + 1));
  for (let i = before.length - 1; i >= 0; i -= 1) {
    for (let j = after.length - 1; j >= 0; j -= 1) {
      common[i][j] = before[i] === after[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const changes = [];
  let i = 0;
  let j = 0;
  while (i < before.length || j < after.length) {
    if (i < before.length && j < after.length && before[i] === after[j]) {
      changes.push({ kind: "same", line: before[i] });
      i += 1;
      j += 1;
    } else if (i < before.length && (j === after.length || common[i + 1][j] >= common[i][j + 1])) {
      // A removed line before the line that replaces it, as diff and git show them.
      changes.push({ kind: "removed", line: before[i] });
      i += 1;
    } else {
      changes.push({ kind: "added", line: after[j] });
      j += 1;
    }
  }
  return changes;
}

const show = (value) => (value === undefined ? "" : JSON.stringify(value));

/** The difference between two values (bytes), as an element. */
export function diffView(beforeBytes, afterBytes) {
  const beforeJson = jsonOf(beforeBytes);
  const afterJson = jsonOf(afterBytes);
  if (beforeJson !== undefined && afterJson !== undefined) {
    const changes = jsonChanges(beforeJson, afterJson);
    if (changes.length === 0) return h("p", { "data-testid": "diff", "data-changes": 0 }, "The two versions hold equal JSON.");
    return table(["Field", "Change", "Before", "After"], changes.map((change) => ({
      cells: [change.path, change.kind, show(change.before), show(change.after)],
      class: change.kind,
      attributes: { "data-path": change.path, "data-change": change.kind },
    })), { class: "diff", "data-testid": "diff", "data-changes": changes.length });
  }
  const beforeText = asText(beforeBytes);
  const afterText = asText(afterBytes);
  if (beforeText === null || afterText === null) {
    const same = beforeBytes.length === afterBytes.length && beforeBytes.every((byte, index) => byte === afterBytes[index]);
    return h("p", { "data-testid": "diff" }, same ? "The two binary values are equal." : "The binary values differ.");
  }
  const changes = lineChanges(beforeText, afterText);
  if (changes === null) return h("p", { "data-testid": "diff" }, "Too many lines to compare here.");
  const changed = changes.filter((change) => change.kind !== "same").length;
  return h("table", { class: "diff", "data-testid": "diff", "data-changes": changed },
    h("tbody", {}, changes.map((change) => h("tr", { class: change.kind === "same" ? null : change.kind },
      h("td", {}, change.kind === "added" ? "+" : change.kind === "removed" ? "−" : " "),
      h("td", {}, change.line)))));
}
