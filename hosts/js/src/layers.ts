// Config layers as the host gives them: TOML text, or plain objects of the same shape, which
// cross as JSON text (the component reads a layer that starts with `{` as JSON, with spans into
// it), so diagnostics name the same key paths and tools and point at the lines of the JSON
// written here: two-space indents, and an object or array that holds no other on one line, as
// a person writes `"concurrency": { "key": "github", "limit": 4 }`.
import { fail, string } from './validate.js';

/** What `resolve` takes: an array of layers, lowest precedence first. Each layer is
 * `{ name, text }` (TOML, or JSON when it starts with `{`), `{ name, value }` (a plain object),
 * a bare string (TOML or JSON) or a bare plain object (named `layer N`, one-based). */
export type LayerInput = string | { name: string; text: string } | { name: string; value: Record<string, unknown> } | Record<string, unknown>;

const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

/** Half a surrogate pair, which UTF-8 (and so the component) cannot carry. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Refuses what JSON cannot say (null, a number that is not finite, an integer past 2^53 as a
 * bigint, functions, symbols, class instances, a cycle) with the key path, instead of dropping
 * or changing it silently. `undefined` fields are left out, as JSON.stringify does; a Date is
 * written as its ISO text. */
function checkValue(value: unknown, path: string, open: Set<object>): void {
  if (typeof value === 'string') {
    if (LONE_SURROGATE.test(value)) fail(path, 'a string without lone surrogates', value);
    return;
  }
  if (value === undefined || typeof value === 'boolean' || value instanceof Date) return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) fail(path, 'a finite number', value);
    return;
  }
  if (typeof value === 'bigint') {
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < -BigInt(Number.MAX_SAFE_INTEGER)) fail(path, 'an integer within 2^53', value);
    return;
  }
  if (Array.isArray(value) || isPlain(value)) {
    if (open.has(value)) fail(path, 'a value without a cycle (it contains itself)', value);
    open.add(value);
    if (Array.isArray(value)) value.forEach((v, i) => checkValue(v, `${path}[${i}]`, open));
    else
      for (const [k, v] of Object.entries(value)) {
        if (LONE_SURROGATE.test(k)) fail(`${path} key`, 'a string without lone surrogates', k);
        checkValue(v, `${path}.${k}`, open);
      }
    open.delete(value);
    return;
  }
  fail(path, 'a JSON value (string, number, boolean, Date, array or plain object)', value);
}

/** A checked value's JSON text at `indent`. */
function emit(value: unknown, indent: string): string {
  if (value instanceof Date) return JSON.stringify(value.toISOString());
  if (typeof value === 'bigint') return String(value);
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  const items: [string, unknown][] = Array.isArray(value)
    ? value.filter((v) => v !== undefined).map((v) => ['', v])
    : Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [`${JSON.stringify(k)}: `, v]);
  const [open, close] = Array.isArray(value) ? ['[', ']'] : ['{', '}'];
  if (items.length === 0) return open + close;
  const nested = (v: unknown) => typeof v === 'object' && v !== null && !(v instanceof Date);
  const pad = Array.isArray(value) ? '' : ' ';
  if (!items.some(([, v]) => nested(v))) return `${open}${pad}${items.map(([k, v]) => k + emit(v, indent)).join(', ')}${pad}${close}`;
  const inner = `${indent}  `;
  return `${open}\n${items.map(([k, v]) => inner + k + emit(v, inner)).join(',\n')}\n${indent}${close}`;
}

/** A plain object as the JSON text the component reads. */
function json(value: unknown, name: string): string {
  if (!isPlain(value)) fail(name, 'a plain object', value);
  checkValue(value, name, new Set());
  return `${emit(value, '')}\n`;
}

/** The layers as `{ name, text }` for the component. */
export function layersIn(layers: unknown): { name: string; text: string }[] {
  if (!Array.isArray(layers)) fail('layers', 'an array of layers (TOML or JSON text, or plain objects)', layers);
  return layers.map((layer: unknown, i) => {
    const at = `layers[${i}]`;
    if (typeof layer === 'string') return { name: `layer ${i + 1}`, text: layer };
    if (!isPlain(layer)) fail(at, 'TOML or JSON text, { name, text }, { name, value } or a plain object', layer);
    if ('text' in layer) {
      if (Object.keys(layer).some((k) => k !== 'name' && k !== 'text')) throw new TypeError(`${at} has text and other fields: write { name, text }`);
      return { name: layer.name === undefined ? `layer ${i + 1}` : string(layer.name, `${at}.name`), text: string(layer.text, `${at}.text`) };
    }
    if ('value' in layer && 'name' in layer && Object.keys(layer).length === 2) {
      return { name: string(layer.name, `${at}.name`), text: json(layer.value, `${at}.value`) };
    }
    return { name: `layer ${i + 1}`, text: json(layer, at) };
  });
}
