// Keys and values are bytes. The console asks the member for base64 (`encoding=base64`) and keeps
// bytes as Uint8Array, so a key that is not UTF-8 is shown, linked and written back exactly.

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

export function fromBase64(text) {
  const binary = atob(text || "");
  const bytes = new Uint8Array(binary.length);
  for (let index = 0; index < binary.length; index += 1) bytes[index] = binary.charCodeAt(index);
  return bytes;
}

export function toBase64(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

export function fromText(text) {
  return encoder.encode(text);
}

/** The bytes as UTF-8 text, or null when they are not UTF-8. */
export function asText(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

export function asHex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join(" ");
}

/** A key for display: its text, or its bytes in hex between angle brackets. */
export function keyLabel(bytes) {
  const text = asText(bytes);
  return text !== null && !/[\u0000-\u001f]/.test(text) ? text : `<${asHex(bytes)}>`;
}

/** etcd's range end of a prefix: the prefix with its last byte below 0xff raised by one; empty
 *  (every key to the end) when every byte is 0xff. */
export function prefixEnd(bytes) {
  const end = Array.from(bytes);
  while (end.length > 0) {
    const last = end.length - 1;
    if (end[last] < 0xff) {
      end[last] += 1;
      return new Uint8Array(end);
    }
    end.pop();
  }
  return new Uint8Array([0]);
}

export function startsWith(bytes, prefix) {
  if (prefix.length > bytes.length) return false;
  return prefix.every((byte, index) => bytes[index] === byte);
}

export function concat(first, second) {
  const joined = new Uint8Array(first.length + second.length);
  joined.set(first, 0);
  joined.set(second, first.length);
  return joined;
}

export function equal(first, second) {
  return first.length === second.length && first.every((byte, index) => byte === second[index]);
}

/** A byte count for people: 1.5 MiB. */
export function formatBytes(count) {
  if (count === null || count === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(count);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}
